//! Sealed blobs (encryption at rest, `docs/format.md`): they read back in every layout, their stored bytes hold
//! no plaintext, a missing or wrong key fails with a typed error before any chunk is read, and moved, replayed or
//! plaintext chunks are refused.

use std::sync::Arc;

use bytes::Bytes;

pub use super::keyring::TempKeyring;
use super::{data, prefix, small_config, store, trickle};
use crate::backend::{BlobRef, ChunkId, ChunkStore};
use crate::backend::{ChunkWrite, Namespace};
use crate::base::error::Error;
use crate::encryption::{EncryptionConfig, LOCAL};
use crate::format::layout::Layout;
use crate::format::manifest::Manifest;
use crate::state::config::{PutOptions, StoreConfig};
use crate::store::BlobStore;

/// The small policy with encryption through `ring`, sealing under `key` by default when given.
pub fn sealed_config(ring: &TempKeyring, key: Option<&str>) -> StoreConfig {
    let mut encryption = EncryptionConfig::new(ring.provider());
    encryption.key = key.map(str::to_owned);
    small_config().with_encryption(encryption)
}

/// Every stored chunk of `m` (under `key`), as the backend holds it.
async fn stored_chunks(backend: &Arc<dyn ChunkStore>, key: &str, m: &Manifest) -> Vec<Bytes> {
    let Layout::Chunked(l) = m.layout() else {
        return Vec::new();
    };
    let blob = BlobRef {
        key: Bytes::copy_from_slice(key.as_bytes()),
        version: m.version,
    };
    let ids: Vec<ChunkId> = (0..l.chunk_count)
        .map(|index| ChunkId {
            salt: l.salt_of(index),
            index,
        })
        .collect();
    let slots = backend.get_chunks(&blob, &ids).await.expect("get_chunks");
    slots
        .into_iter()
        .map(|s| s.expect("every chunk stored"))
        .collect()
}

/// Asserts that neither the manifest record of `key` nor the stored chunks of its version `m` hold the marker.
async fn stores_no_plaintext(backend: &Arc<dyn ChunkStore>, key: &str, m: &Manifest) {
    let record = backend
        .get_record(Namespace::Manifest, key.as_bytes())
        .await
        .expect("manifest record")
        .expect("stored");
    assert!(
        !shows_marker(&record),
        "{key}: the manifest record holds plaintext"
    );
    for chunk in stored_chunks(backend, key, m).await {
        assert!(
            !shows_marker(&chunk),
            "{key}: a stored chunk holds plaintext"
        );
    }
}

/// `len` pseudo-random bytes whose every 64 bytes start with `marker`, so that any plaintext stored shows it.
pub fn marked_with(marker: &[u8], len: usize, seed: u64) -> Bytes {
    let mut v = data(len, seed).to_vec();
    for piece in v.chunks_mut(64) {
        let n = piece.len().min(marker.len());
        piece[..n].copy_from_slice(&marker[..n]);
    }
    Bytes::from(v)
}

/// Whether `bytes` hold `marker`.
pub fn shows(marker: &[u8], bytes: &[u8]) -> bool {
    bytes.windows(marker.len()).any(|w| w == marker)
}

const MARKER: &[u8] = b"SALTBLOB-PLAINTEXT-MARKER";

fn marked(len: usize, seed: u64) -> Bytes {
    marked_with(MARKER, len, seed)
}

fn shows_marker(bytes: &[u8]) -> bool {
    shows(MARKER, bytes)
}

/// Sealed blobs of every layout read back whole, by range and streamed; their manifests record the key and a
/// keyed digest, and neither their manifest records nor their stored chunks hold the plaintext.
pub async fn sealed_blobs_round_trip_and_store_no_plaintext(backend: Arc<dyn ChunkStore>) {
    let ring = TempKeyring::new();
    let store = store(&backend, sealed_config(&ring, Some("tenant-a")));
    let p = prefix("sealed");
    for (i, size) in [
        0usize, 1, 999, 1000, 1001, 4096, 4097, 65_536, 65_537, 300_000,
    ]
    .into_iter()
    .enumerate()
    {
        let payload = marked(size, i as u64);
        for streamed in [false, true] {
            let key = format!("{p}{size}-{streamed}");
            let m = if streamed {
                store
                    .put_stream(&key, trickle(&payload), &PutOptions::new())
                    .await
            } else {
                store.put(&key, payload.clone(), &PutOptions::new()).await
            }
            .unwrap_or_else(|e| panic!("put {key}: {e}"));
            let sealing = m
                .sealing
                .as_ref()
                .unwrap_or_else(|| panic!("{key}: not sealed"));
            assert_eq!(
                (sealing.kek.provider, sealing.kek.name.as_str()),
                (LOCAL, "tenant-a")
            );
            assert_ne!(
                &m.digest,
                blake3::hash(&payload).as_bytes(),
                "{key}: plain digest"
            );
            assert_eq!(store.head(&key).await.expect("head"), m);
            let got = store
                .get(&key)
                .await
                .unwrap_or_else(|e| panic!("get {key}: {e}"));
            assert!(got == payload, "{key}: read back different bytes");
            for range in [
                0..size as u64,
                size as u64 / 3..size as u64 / 2,
                size as u64..size as u64,
            ] {
                let part = store
                    .get_range(&key, range.clone())
                    .await
                    .unwrap_or_else(|e| panic!("{key} {range:?}: {e}"));
                assert!(
                    part[..] == payload[range.start as usize..range.end as usize],
                    "{key} {range:?}"
                );
            }
            stores_no_plaintext(&backend, &key, &m).await;
        }
    }
    let report = store
        .fsck(&crate::upkeep::fsck::FsckOptions::new().with_prefix(p.clone()))
        .await
        .expect("fsck");
    assert!(report.damaged.is_empty(), "{report:?}");
    assert_eq!(report.blobs, 20, "fsck checked every sealed blob");
}

/// Plaintext and sealed blobs live side by side; a put names its own key; without a provider, or with a
/// keyring that lacks the key, a sealed blob fails to read with `KeyUnavailable` naming the key, and an
/// unknown key fails a put before anything is written.
pub async fn keys_are_chosen_per_put_and_missing_keys_are_typed_errors(
    backend: Arc<dyn ChunkStore>,
) {
    let ring = TempKeyring::new();
    let store = store(&backend, sealed_config(&ring, None));
    let p = prefix("keys");
    let (plain, sealed_b) = (format!("{p}plain"), format!("{p}sealed-b"));
    let payload = marked(20_000, 1);
    let m = store
        .put(&plain, payload.clone(), &PutOptions::new())
        .await
        .expect("put");
    assert!(m.sealing.is_none(), "no key named: plaintext");
    let opts = PutOptions::new().with_encryption_key("tenant-b");
    let m = store
        .put(&sealed_b, payload.clone(), &opts)
        .await
        .expect("put");
    assert_eq!(
        m.sealing.as_ref().map(|s| s.kek.name.as_str()),
        Some("tenant-b")
    );
    for key in [&plain, &sealed_b] {
        assert!(store.get(key).await.expect("get") == payload, "{key}");
    }

    let missing = format!("{p}missing");
    let opts = PutOptions::new().with_encryption_key("no-such-key");
    match store.put(&missing, payload.clone(), &opts).await {
        Err(Error::KeyUnavailable { key, .. }) => assert!(key.contains("no-such-key"), "{key}"),
        other => panic!("a put under an unknown key: {other:?}"),
    }
    assert!(matches!(
        store.head(&missing).await,
        Err(Error::NotFound { .. })
    ));

    let unkeyed = BlobStore::new(Arc::clone(&backend), small_config()).expect("store");
    assert!(unkeyed.get(&plain).await.expect("plaintext reads") == payload);
    match unkeyed.get(&sealed_b).await {
        Err(e @ Error::KeyUnavailable { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("tenant-b") && msg.contains("encryption=local"),
                "{msg}"
            );
        }
        other => panic!("a sealed blob read without keys: {other:?}"),
    }
    match unkeyed
        .put(
            &missing,
            payload.clone(),
            &PutOptions::new().with_encryption_key("tenant-a"),
        )
        .await
    {
        Err(Error::InvalidArgument { what, .. }) => assert_eq!(what, "encryption key"),
        other => panic!("a put naming a key on a store without a provider: {other:?}"),
    }

    let other_ring = TempKeyring::new();
    let other = store_with(&backend, &other_ring);
    match other.get(&sealed_b).await {
        Err(Error::KeyUnavailable { key, .. }) => assert!(key.contains("tenant-b"), "{key}"),
        other => panic!("a sealed blob read with another keyring: {other:?}"),
    }
}

fn store_with(backend: &Arc<dyn ChunkStore>, ring: &TempKeyring) -> BlobStore {
    store(backend, sealed_config(ring, None))
}

/// A sealed manifest copied under another key fails its key commitment before any chunk is read; a chunk of an
/// older version, or a plaintext chunk, put in a sealed version's place is refused, never returned.
pub async fn moved_and_replayed_sealed_data_is_refused(backend: Arc<dyn ChunkStore>) {
    let ring = TempKeyring::new();
    let store = store(&backend, sealed_config(&ring, Some("tenant-a")));
    let p = prefix("moved");
    let (a, b) = (format!("{p}a"), format!("{p}b"));
    let old = store
        .put(&a, data(30_000, 1), &PutOptions::new())
        .await
        .expect("put");
    let new = store
        .put(&a, data(30_000, 2), &PutOptions::new())
        .await
        .expect("put");
    store
        .put(&b, data(30_000, 3), &PutOptions::new())
        .await
        .expect("put");

    // A's manifest under B: the commitment binds the key.
    let record = backend
        .get_record(Namespace::Manifest, a.as_bytes())
        .await
        .expect("read")
        .expect("stored");
    backend
        .put_record(
            Namespace::Manifest,
            b.as_bytes(),
            record,
            &crate::backend::Precondition::None,
        )
        .await
        .expect("write");
    match store.get(&b).await {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("commitment"), "{e}"),
        other => panic!("a manifest moved to another key: {other:?}"),
    }

    // Chunk 1 of the old version of A written over chunk 1 of the new one.
    let old_chunks = stored_chunks(&backend, &a, &old).await;
    let Layout::Chunked(l) = new.layout() else {
        panic!("chunked")
    };
    let blob = BlobRef {
        key: Bytes::copy_from_slice(a.as_bytes()),
        version: new.version,
    };
    let put = |data: Bytes| {
        backend.put_chunks(
            &blob,
            vec![ChunkWrite {
                salt: l.salt_of(1),
                index: 1,
                data,
            }],
        )
    };
    put(old_chunks[1].clone()).await.expect("write");
    let err = store.get(&a).await.expect_err("a replayed chunk");
    assert!(err.is_corruption(), "{err}");
    // A plaintext chunk, with a valid checksum for its place: refused as plaintext in a sealed version.
    let plain = crate::format::codec::encode_chunk(
        crate::format::codec::ChunkPlace {
            key: a.as_bytes(),
            version: new.version,
            index: 1,
        },
        &data(4096, 9),
        crate::format::codec::Codec::None,
    );
    put(plain).await.expect("write");
    match store.get_range(&a, 4096..8192).await {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("plaintext"), "{e}"),
        other => panic!("a plaintext chunk in a sealed version: {other:?}"),
    }
}

/// Segments (multipart parts) put under a key are sealed each under its own version and keep their sealing through
/// their record and the compose; the composed blob reads back whole and by ranges across segments, holds no
/// plaintext, names its key, is refused without the key, and passes fsck; an inline segment's record without its
/// encryption block does not decode.
pub async fn sealed_segments_compose_and_read_back(backend: Arc<dyn ChunkStore>) {
    let ring = TempKeyring::new();
    let store = store(&backend, sealed_config(&ring, Some("tenant-a")));
    let p = prefix("sealed-segments");
    let key = format!("{p}multipart");
    // Inline, single-partition and salted under the small policy.
    let parts = [marked(700, 1), marked(20_000, 2), marked(150_000, 3)];
    let mut segments = Vec::new();
    for part in &parts {
        let segment = store
            .put_segment(
                &key,
                &part[..],
                &PutOptions::new(),
                std::time::Duration::from_secs(3600),
            )
            .await
            .expect("put_segment");
        let sealing = segment.sealing.as_ref().expect("sealed");
        assert_eq!(sealing.kek.name, "tenant-a");
        let kept =
            crate::format::manifest::Segment::decode(&segment.encode()).expect("segment record");
        assert_eq!(kept, segment, "the record keeps the sealing");
        let mut plain = segment.clone();
        plain.sealing = None;
        let stripped = crate::format::manifest::Segment::decode(&plain.encode());
        assert!(
            stripped.is_err()
                || matches!(
                    segment.body,
                    crate::format::manifest::ManifestBody::Chunked { .. }
                ),
            "an inline segment without its block does not decode: {stripped:?}"
        );
        segments.push(kept);
    }
    let m = store
        .compose(&key, &segments, &PutOptions::new())
        .await
        .expect("compose");
    assert_eq!(m.sealed_by().map(|s| s.kek.name.as_str()), Some("tenant-a"));
    let whole: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    assert!(
        store.get(&key).await.expect("get") == whole,
        "read back whole"
    );
    for range in [0..700u64, 500..30_000, 20_000..170_700, 170_699..170_700] {
        let got = store.get_range(&key, range.clone()).await.expect("range");
        assert!(
            got[..] == whole[range.start as usize..range.end as usize],
            "{range:?}"
        );
    }
    let record = backend
        .get_record(Namespace::Manifest, key.as_bytes())
        .await
        .expect("read")
        .expect("stored");
    assert!(!shows_marker(&record), "the manifest holds plaintext");
    for segment in &segments {
        let part = Manifest {
            version: segment.version,
            size: segment.size,
            body: segment.body.clone(),
            ..m.clone()
        };
        for chunk in stored_chunks(&backend, &key, &part).await {
            assert!(!shows_marker(&chunk), "a segment's chunk holds plaintext");
        }
    }
    let unkeyed = BlobStore::new(Arc::clone(&backend), small_config()).expect("store");
    assert!(
        matches!(unkeyed.get(&key).await, Err(Error::KeyUnavailable { .. })),
        "a sealed multipart blob without keys"
    );
    // A stream fails before its first byte, so that a server has not answered yet.
    assert!(
        matches!(
            unkeyed.get_stream(&key).await,
            Err(Error::KeyUnavailable { .. })
        ),
        "a stream of a sealed multipart blob without keys fails when it is opened"
    );
    let report = store
        .fsck(&crate::upkeep::fsck::FsckOptions::new().with_prefix(p.clone()))
        .await
        .expect("fsck");
    assert!(report.damaged.is_empty() && report.blobs == 1, "{report:?}");
    assert_eq!(
        store.rekey(&key).await.expect("rekey"),
        crate::store::Rekeyed::Current
    );
}

/// Blobs put under a customer key (S3's SSE-C) on a store without a key provider: every layout and a multipart
/// blob read back, whole and by range, with that key and no other; without it, or with another, the read fails
/// with `KeyUnavailable` (provider `customer`) before a byte; no plaintext is stored; fsck reports them unverified
/// (not damaged), rekey and relayout leave them alone; a put naming a customer key and a store key is refused; a
/// read giving a customer key for a blob not sealed under one is refused (`CUSTOMER_KEY_NOT_APPLICABLE`).
pub async fn customer_keys_seal_and_only_the_same_key_reads(backend: Arc<dyn ChunkStore>) {
    use crate::encryption::{CUSTOMER, CustomerKey};
    use crate::policy::relayout::Relaid;
    use crate::state::config::GetOptions;
    use crate::store::Rekeyed;
    let store = store(&backend, small_config());
    let p = prefix("customer");
    let given = CustomerKey::new([0x5A; 32]);
    let other = CustomerKey::new([0xA5; 32]);
    let with = |k: &CustomerKey| GetOptions::new().with_customer_key(k.clone());
    // Manifests name the key by its fingerprint in this store.
    let fingerprint = store
        .customer_fingerprint(&given)
        .await
        .expect("fingerprint");
    assert_ne!(fingerprint, given.id());
    let refused_as = |r: crate::base::error::Result<Bytes>, what: &str| match r {
        Err(Error::KeyUnavailable {
            provider: CUSTOMER,
            key,
            ..
        }) => assert!(
            key.contains(&fingerprint),
            "{what}: names the key's fingerprint"
        ),
        other => panic!("{what}: {other:?}"),
    };
    let opts = PutOptions::new().with_customer_key(given.clone());
    let mut keys = Vec::new();
    for (i, size) in [0usize, 999, 1001, 65_537, 300_000].into_iter().enumerate() {
        let payload = marked(size, 40 + i as u64);
        for streamed in [false, true] {
            let key = format!("{p}{size}-{streamed}");
            let m = if streamed {
                store.put_stream(&key, trickle(&payload), &opts).await
            } else {
                store.put(&key, payload.clone(), &opts).await
            }
            .unwrap_or_else(|e| panic!("put {key}: {e}"));
            let sealing = m.sealing.as_ref().expect("sealed");
            assert_eq!(
                (sealing.kek.provider, sealing.kek.name.as_str()),
                (CUSTOMER, fingerprint.as_str())
            );
            let got = store.get_with(&key, &with(&given)).await.expect("get");
            assert!(got == payload, "{key}: read back different bytes");
            let range = size as u64 / 3..size as u64 / 2;
            let part = store
                .get_with(&key, &with(&given).with_range(range.clone()))
                .await
                .expect("range");
            assert!(part[..] == payload[range.start as usize..range.end as usize]);
            refused_as(store.get(&key).await, "no key");
            refused_as(store.get_with(&key, &with(&other)).await, "another key");
            assert!(
                store.get_stream(&key).await.is_err(),
                "{key}: a stream without the key fails when it is opened"
            );
            stores_no_plaintext(&backend, &key, &m).await;
            keys.push(key);
        }
    }

    // A multipart blob whose parts were each put under the key.
    let key = format!("{p}multipart");
    let parts = [marked(700, 50), marked(150_000, 51)];
    let mut segments = Vec::new();
    for part in &parts {
        let lease = std::time::Duration::from_secs(3600);
        let segment = store
            .put_segment(&key, &part[..], &opts, lease)
            .await
            .expect("put_segment");
        assert_eq!(
            segment.sealing.as_ref().map(|s| s.kek.provider),
            Some(CUSTOMER)
        );
        segments.push(segment);
    }
    store
        .compose(&key, &segments, &PutOptions::new())
        .await
        .expect("compose");
    let whole: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    let got = store.get_with(&key, &with(&given)).await.expect("get");
    assert!(got == whole, "the multipart blob reads back");
    refused_as(store.get(&key).await, "multipart, no key");
    refused_as(
        store.get_with(&key, &with(&other)).await,
        "multipart, another key",
    );

    // Maintenance cannot open them, and says so rather than calling them damaged or rewriting them.
    let report = store
        .fsck(&crate::upkeep::fsck::FsckOptions::new().with_prefix(p.clone()))
        .await
        .expect("fsck");
    assert!(report.damaged.is_empty(), "{report:?}");
    assert_eq!(report.unverified.len(), keys.len() + 1, "{report:?}");
    assert!(
        matches!(store.rekey(&keys[2]).await, Ok(Rekeyed::Skipped(_))),
        "rekey leaves a customer-sealed blob alone"
    );
    assert!(
        matches!(
            store.relayout(&keys[2], None).await,
            Ok(Relaid::Skipped(_) | Relaid::Fits)
        ),
        "relayout leaves a customer-sealed blob alone"
    );
    assert!(
        store.get_with(&keys[2], &with(&given)).await.is_ok(),
        "and it still reads"
    );

    // A key given for a blob not sealed under one is refused, as S3 refuses it, before a byte is read: whole,
    // ranged or streamed, plain or multipart.
    let plain = format!("{p}plain");
    store
        .put(&plain, marked(70_000, 52), &PutOptions::new())
        .await
        .expect("plain put");
    let plain_parts = format!("{p}plain-multipart");
    let lease = std::time::Duration::from_secs(3600);
    let segment = store
        .put_segment(
            &plain_parts,
            &marked(900, 53)[..],
            &PutOptions::new(),
            lease,
        )
        .await
        .expect("plain put_segment");
    store
        .compose(&plain_parts, &[segment], &PutOptions::new())
        .await
        .expect("plain compose");
    for key in [&plain, &plain_parts] {
        for opts in [with(&given), with(&given).with_range(0..10)] {
            match store.get_stream_with(key, &opts).await {
                Err(Error::InvalidArgument { what, reason }) => {
                    assert_eq!(what, crate::encryption::CUSTOMER_KEY_NOT_APPLICABLE);
                    assert!(
                        reason.contains("not sealed under a customer key"),
                        "{reason}"
                    );
                }
                other => panic!(
                    "{key}: a customer key on a plain blob: {:?}",
                    other.map(|s| s.manifest)
                ),
            }
        }
        assert!(store.get(key).await.is_ok(), "{key}: it reads without one");
    }
    assert!(
        matches!(
            store.get_with(&keys[0], &GetOptions::new()).await,
            Err(Error::KeyUnavailable { .. })
        ),
        "and a sealed one still needs its key"
    );

    let both = opts.clone().with_encryption_key("tenant-a");
    let e = store
        .put(format!("{p}both"), Bytes::from_static(b"x"), &both)
        .await
        .expect_err("two keys");
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(
        matches!(
            store.head(format!("{p}both")).await,
            Err(Error::NotFound { .. })
        ),
        "nothing was stored"
    );
}
