//! The conformance suite: the behaviour every backend must show, as `pub async fn` cases.
//!
//! A backend crate runs it with [`crate::conformance_suite!`], giving an expression that builds a fresh
//! [`Fixture`]. Cases use their own random key prefix, so a fixture may share one database between cases.
//! Cases panic with a message on failure (they are tests).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use tokio::io::{AsyncRead, AsyncWriteExt};

use crate::backend::{BlobRef, ChunkId, ChunkStore, ChunkWrite, Namespace, Precondition};
use crate::codec::Codec;
use crate::config::{PutCondition, PutOptions, StoreConfig};
use crate::fsck::{FsckOptions, OrphanReason};
use crate::gc::GcOptions;
use crate::layout::{KIB, Layout, LayoutPolicy, MIB};
use crate::manifest::ManifestBody;
use crate::store::BlobStore;
use crate::version::VersionId;
use crate::{Error, Manifest};

/// A backend for one case, and whatever must live as long as it (a temporary directory, a server).
pub struct Fixture {
    pub backend: Arc<dyn ChunkStore>,
    pub guard: Box<dyn Any + Send>,
}

impl Fixture {
    /// A fixture with nothing to keep alive.
    pub fn new(backend: Arc<dyn ChunkStore>) -> Self {
        Self {
            backend,
            guard: Box::new(()),
        }
    }
}

/// Generates one `#[tokio::test]` per conformance case; `$make` is an expression evaluating to a future of
/// [`Fixture`].
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            roundtrip_sizes, roundtrip_default_policy_large, overwrite_larger_smaller_larger, delete_then_get,
            range_reads, list_by_prefix, describe_layouts, streaming_put_of_unknown_length,
            size_hint_mismatch_changes_nothing, conditional_puts, corrupt_chunk_is_detected,
            corrupt_manifest_is_detected, bad_input_changes_nothing, concurrent_puts_same_key,
            compression_round_trips, readers_survive_overwrite_within_grace, per_put_overrides,
            gc_reclaims_replaced_and_deleted_versions, gc_reclaims_abandoned_puts,
            put_without_its_lease_does_not_commit, fsck_reports_damage_and_repairs_only_orphans);
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let fixture: $crate::conformance::Fixture = $make.await;
                $crate::conformance::$case(fixture.backend.clone()).await;
                drop(fixture);
            }
        )*
    };
}

/// The small policy the cases use, so that every layout shows up with small blobs: inline up to 1000 bytes,
/// 4 KiB chunks, one partition up to 64 KiB, at most 7 salts, a 128 KiB window, 16 KiB batches, no grace.
pub fn small_config() -> StoreConfig {
    StoreConfig::default()
        .with_policy(
            LayoutPolicy::default()
                .with_inline_limit(1000)
                .with_chunk_size(4096)
                .with_fanout_threshold(64 * KIB)
                .with_max_salt(7),
        )
        .with_inflight_bytes(128 * KIB as usize)
        .with_batch_bytes(16 * KIB as usize)
        .with_grace(Duration::ZERO)
}

fn store(backend: &Arc<dyn ChunkStore>, config: StoreConfig) -> BlobStore {
    BlobStore::new(Arc::clone(backend), config).expect("valid config")
}

/// A random key prefix for one case.
pub fn prefix(case: &str) -> String {
    format!("{case}-{:016x}/", rand::random::<u64>())
}

/// `len` pseudo-random bytes (incompressible), different for each `seed`.
pub fn data(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// A reader that hands out its data in pieces of odd sizes, like a pipe.
struct Trickle {
    data: Bytes,
    step: usize,
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = self.data.len().min(buf.remaining()).min(self.step);
        let piece = self.data.split_to(n);
        buf.put_slice(&piece);
        self.step = self.step % 7919 + 1013;
        std::task::Poll::Ready(Ok(()))
    }
}

fn trickle(data: &Bytes) -> Trickle {
    Trickle {
        data: data.clone(),
        step: 1,
    }
}

async fn assert_holds(store: &BlobStore, key: &str, expected: &Bytes) -> Manifest {
    let got = store
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"));
    assert!(
        got == *expected,
        "{key}: read {} bytes that differ from the {} written",
        got.len(),
        expected.len()
    );
    let m = store.head(key).await.expect("head");
    assert_eq!(m.size, expected.len() as u64, "{key}: size");
    assert_eq!(
        m.digest,
        *blake3::hash(expected).as_bytes(),
        "{key}: digest"
    );
    m
}

async fn chunk_present(backend: &Arc<dyn ChunkStore>, key: &str, m: &Manifest, index: u64) -> bool {
    let Layout::Chunked(l) = m.layout() else {
        return false;
    };
    let blob = BlobRef {
        key: Bytes::copy_from_slice(key.as_bytes()),
        version: m.version,
    };
    let slots = backend
        .get_chunks(
            &blob,
            &[ChunkId {
                salt: l.salt_of(index),
                index,
            }],
        )
        .await
        .expect("get_chunks");
    slots.into_iter().next().flatten().is_some()
}

fn expected_kind(size: u64) -> &'static str {
    if size <= 1000 {
        "inline"
    } else if size <= 64 * KIB {
        "single-partition"
    } else {
        "salted"
    }
}

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
                let want_salt = if size <= 64 * KIB {
                    1
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
    assert_eq!(d.bytes_per_salt.len(), 100, "default max salt");
    assert_eq!(d.bytes_per_salt.iter().sum::<u64>(), payload.len() as u64);
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

pub async fn overwrite_larger_smaller_larger(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("overwrite"));
    let mut previous: Option<Manifest> = None;
    for (i, size) in [200_000usize, 500, 300_000, 5000].into_iter().enumerate() {
        let payload = data(size, 100 + i as u64);
        let m = store
            .put(&key, payload.clone(), &PutOptions::new())
            .await
            .expect("put");
        assert_holds(&store, &key, &payload).await;
        if let Some(prev) = previous {
            assert!(m.version > prev.version, "versions increase");
            store.reclaim_due().await.expect("reclaim");
            if matches!(prev.body, ManifestBody::Chunked { .. }) {
                assert!(
                    !chunk_present(&backend, &key, &prev, 0).await,
                    "chunks of replaced version are reclaimed"
                );
            }
        }
        assert_holds(&store, &key, &payload).await;
        previous = Some(m);
    }
}

pub async fn delete_then_get(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}gone", prefix("delete"));
    let m = store
        .put(&key, data(100_000, 1), &PutOptions::new())
        .await
        .expect("put");
    assert!(chunk_present(&backend, &key, &m, 0).await);
    assert_eq!(store.delete(&key).await.expect("delete"), Some(m.version));
    assert!(
        matches!(store.get(&key).await, Err(Error::NotFound { .. })),
        "get after delete"
    );
    assert!(
        matches!(store.head(&key).await, Err(Error::NotFound { .. })),
        "head after delete"
    );
    assert_eq!(
        store.delete(&key).await.expect("delete again"),
        None,
        "deleting nothing is fine"
    );
    let report = store.reclaim_due().await.expect("reclaim");
    assert!(
        report.versions >= 1,
        "reclaim deleted the version: {report:?}"
    );
    assert!(
        !chunk_present(&backend, &key, &m, 0).await,
        "chunks of deleted blob are reclaimed"
    );
    let err = store.get(&key).await.expect_err("missing");
    assert!(
        err.to_string().contains("not found") && err.to_string().contains("gone"),
        "{err}"
    );
}

pub async fn range_reads(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("range");
    for (size, name) in [(50_000u64, "salted"), (20_000, "single"), (700, "inline")] {
        let key = format!("{p}{name}");
        let payload = data(size as usize, size);
        store
            .put(&key, payload.clone(), &PutOptions::new())
            .await
            .expect("put");
        let ranges = [
            0..1,
            0..size,
            size - 1..size,
            size..size,
            10..10,
            4095.min(size - 2)..4097.min(size),
            4096.min(size - 1)..8192.min(size),
            3..size - 3,
            (size / 2)..(size / 2 + 4096 * 3).min(size),
        ];
        for r in ranges {
            let got = store
                .get_range(&key, r.clone())
                .await
                .unwrap_or_else(|e| panic!("{name} {r:?}: {e}"));
            assert_eq!(
                &got[..],
                &payload[r.start as usize..r.end as usize],
                "{name} range {r:?}"
            );
        }
        for bad in [size..size + 1, 0..size + 1, size + 10..size + 20] {
            match store.get_range(&key, bad.clone()).await {
                Err(Error::RangeNotSatisfiable { size: s, .. }) => assert_eq!(s, size),
                other => panic!("{name} {bad:?}: expected RangeNotSatisfiable, got {other:?}"),
            }
        }
    }
}

pub async fn list_by_prefix(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("list");
    for k in ["a/1", "a/2", "a/3/x", "ab", "b/1"] {
        store
            .put(format!("{p}{k}"), data(10, 1), &PutOptions::new())
            .await
            .expect("put");
    }
    store
        .put(format!("{p}a/big"), data(70_000, 2), &PutOptions::new())
        .await
        .expect("put");
    let keys = |entries: Vec<crate::ListEntry>| -> Vec<String> {
        entries
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e.key).into_owned())
            .collect()
    };
    let a = keys(store.list(format!("{p}a/")).await.expect("list"));
    assert_eq!(
        a,
        ["a/1", "a/2", "a/3/x", "a/big"].map(|k| format!("{p}{k}")),
        "prefix a/ excludes ab and b/"
    );
    assert_eq!(keys(store.list(&p).await.expect("list")).len(), 6);
    assert!(
        store
            .list(format!("{p}zzz"))
            .await
            .expect("list")
            .is_empty()
    );
    let entries = store.list(format!("{p}a/big")).await.expect("list");
    assert_eq!(
        entries.first().map(|e| e.manifest.size),
        Some(70_000),
        "entries carry manifests"
    );
    // More than one page.
    let many = format!("{p}many/");
    for i in 0..600 {
        store
            .put(
                format!("{many}{i:04}"),
                Bytes::from(vec![1u8; 3]),
                &PutOptions::new(),
            )
            .await
            .expect("put");
    }
    let listed = keys(store.list(&many).await.expect("list many"));
    assert_eq!(listed.len(), 600);
    assert!(
        listed.windows(2).all(|w| w[0] < w[1]),
        "listing is in key order"
    );
    store.delete(format!("{many}0300")).await.expect("delete");
    assert_eq!(
        store.list(&many).await.expect("list").len(),
        599,
        "deleted keys are not listed"
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

pub async fn conditional_puts(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("cond"));
    let if_absent = PutOptions::new().with_condition(PutCondition::IfAbsent);
    let v1 = store
        .put(&key, data(70_000, 1), &if_absent)
        .await
        .expect("if-absent on absent key");
    match store.put(&key, data(100, 2), &if_absent).await {
        Err(Error::AlreadyExists { current, .. }) => assert_eq!(current, Some(v1.version)),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    let v2 = store
        .put(
            &key,
            data(200, 3),
            &PutOptions::new().with_condition(PutCondition::IfVersion(v1.version)),
        )
        .await
        .expect("if-version current");
    match store
        .put(
            &key,
            data(300, 4),
            &PutOptions::new().with_condition(PutCondition::IfVersion(v1.version)),
        )
        .await
    {
        Err(Error::PreconditionFailed {
            expected, actual, ..
        }) => {
            assert_eq!((expected, actual), (v1.version, Some(v2.version)));
        }
        other => panic!("expected PreconditionFailed, got {other:?}"),
    }
    assert_holds(&store, &key, &data(200, 3)).await;
    let absent = format!("{key}-absent");
    let r = store
        .put(
            &absent,
            data(10, 5),
            &PutOptions::new().with_condition(PutCondition::IfVersion(v1.version)),
        )
        .await;
    assert!(
        matches!(r, Err(Error::PreconditionFailed { actual: None, .. })),
        "{r:?}"
    );
    assert!(matches!(
        store.head(&absent).await,
        Err(Error::NotFound { .. })
    ));
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
    let capped = BlobStore::new(
        Arc::clone(&backend),
        small_config().with_max_blob_size(50_000),
    )
    .expect("config");
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

pub async fn concurrent_puts_same_key(backend: Arc<dyn ChunkStore>) {
    let store = store(
        &backend,
        small_config().with_grace(Duration::from_secs(3600)),
    );
    let key = format!("{}hot", prefix("concurrent"));
    let values: Vec<Bytes> = [500usize, 5000, 70_000, 150_000, 3000, 90_000]
        .iter()
        .enumerate()
        .map(|(i, n)| data(*n, i as u64))
        .collect();
    let digests: Vec<[u8; 32]> = values.iter().map(|v| *blake3::hash(v).as_bytes()).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..3 {
        for v in &values {
            let (store, key, v) = (store.clone(), key.clone(), v.clone());
            tasks.spawn(async move {
                store
                    .put(&key, v, &PutOptions::new())
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("put {round}: {e}"))
            });
        }
        for _ in 0..4 {
            let (store, key, digests) = (store.clone(), key.clone(), digests.clone());
            tasks.spawn(async move {
                match store.get(&key).await {
                    Ok(b) if digests.contains(blake3::hash(&b).as_bytes()) => Ok(()),
                    Ok(b) => Err(format!("read {} bytes that no put wrote", b.len())),
                    Err(Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(format!("get: {e}")),
                }
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task").expect("operation");
    }
    let last = store.get(&key).await.expect("final get");
    let m = store.head(&key).await.expect("head");
    assert!(
        digests.contains(blake3::hash(&last).as_bytes())
            && m.digest == *blake3::hash(&last).as_bytes()
    );
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
    let ManifestBody::Chunked { stored_bytes, .. } = m.body else {
        panic!("chunked")
    };
    assert!(
        stored_bytes <= 100_000 + 25 * 12,
        "incompressible chunks are stored raw: {stored_bytes}"
    );
}

pub async fn readers_survive_overwrite_within_grace(backend: Arc<dyn ChunkStore>) {
    let key = format!("{}k", prefix("grace"));
    let old = data(300_000, 1);
    let patient = store(
        &backend,
        small_config()
            .with_grace(Duration::from_secs(3600))
            .with_inflight_bytes(8192),
    );
    patient
        .put(&key, old.clone(), &PutOptions::new())
        .await
        .expect("put");
    // A reader starts, the key is overwritten, reclaim runs: the reader still gets the old version whole.
    let mut stream = patient.get_stream(&key).await.expect("get_stream");
    let mut got = stream
        .next()
        .await
        .expect("first piece")
        .expect("ok")
        .to_vec();
    patient
        .put(&key, data(2000, 2), &PutOptions::new())
        .await
        .expect("overwrite");
    let report = patient.reclaim_due().await.expect("reclaim");
    assert!(
        report.next_due_micros.is_some() && report.versions == 0,
        "grace period respected: {report:?}"
    );
    while let Some(piece) = stream.next().await {
        got.extend_from_slice(&piece.expect("piece of the old version"));
    }
    assert!(got == old, "the old version read whole after the overwrite");
    // With the grace period over, a reader of a reclaimed version is told to read again.
    patient
        .put(&key, old.clone(), &PutOptions::new())
        .await
        .expect("put");
    let mut stream = patient.get_stream(&key).await.expect("get_stream");
    stream.next().await.expect("first piece").expect("ok");
    patient
        .put(&key, data(2000, 3), &PutOptions::new())
        .await
        .expect("overwrite");
    patient.reclaim_all().await.expect("reclaim all");
    let mut outcome = Ok(());
    while let Some(piece) = stream.next().await {
        if let Err(e) = piece {
            outcome = Err(e);
            break;
        }
    }
    match outcome {
        Err(e @ Error::VersionReclaimed { .. }) => assert!(e.is_retryable()),
        other => panic!("expected VersionReclaimed, got {other:?}"),
    }
    assert_holds(&patient, &key, &data(2000, 3)).await;
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
    let other = BlobStore::new(Arc::clone(&backend), StoreConfig::default()).expect("config");
    assert_eq!(other.get(&key).await.expect("old layout readable"), payload);
    let got = other.get_range(&key, 8191..8193).await.expect("range");
    assert_eq!(&got[..], &payload[8191..8193]);
}

/// Stored chunks of `key`, counted per version (via [`ChunkStore::scan_chunks`]).
async fn chunks_by_version(
    backend: &Arc<dyn ChunkStore>,
    key: &str,
) -> std::collections::BTreeMap<VersionId, u64> {
    let mut out = std::collections::BTreeMap::new();
    let mut all = backend.scan_chunks();
    while let Some(addr) = all.try_next().await.expect("scan_chunks") {
        if addr.key == key.as_bytes() {
            *out.entry(addr.version).or_insert(0) += 1;
        }
    }
    out
}

/// Starts a put of `key` that streams from a pipe, feeds it `first` bytes and waits until its new version has
/// stored at least `chunks` chunks. Returns the pipe (write more, or drop it to end the stream), the put's task
/// and the new version.
async fn running_put(
    store: &BlobStore,
    backend: &Arc<dyn ChunkStore>,
    key: &str,
    committed: VersionId,
    first: usize,
    chunks: u64,
) -> (
    tokio::io::DuplexStream,
    tokio::task::JoinHandle<crate::Result<Manifest>>,
    VersionId,
) {
    let (mut w, r) = tokio::io::duplex(16 * KIB as usize);
    let put = tokio::spawn({
        let (store, key) = (store.clone(), key.to_owned());
        async move { store.put_stream(&key, r, &PutOptions::new()).await }
    });
    w.write_all(&data(first, 2)).await.expect("feed");
    let version = wait_for_uncommitted_chunks(backend, key, committed, chunks).await;
    (w, put, version)
}

/// Polls `chunks_by_version` until some version other than `committed` has at least `at_least` chunks.
async fn wait_for_uncommitted_chunks(
    backend: &Arc<dyn ChunkStore>,
    key: &str,
    committed: VersionId,
    at_least: u64,
) -> VersionId {
    for _ in 0..200 {
        let found = chunks_by_version(backend, key).await;
        if let Some((v, _)) = found
            .iter()
            .find(|(v, n)| **v != committed && **n >= at_least)
        {
            return *v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{key}: the running put never stored {at_least} chunks");
}

pub async fn gc_reclaims_replaced_and_deleted_versions(backend: Arc<dyn ChunkStore>) {
    let p = prefix("gc-replaced");
    let store = store(
        &backend,
        small_config().with_grace(Duration::from_secs(3600)),
    );
    let (k1, k2) = (format!("{p}replaced"), format!("{p}deleted"));
    let old = store
        .put(&k1, data(200 * KIB as usize, 1), &PutOptions::new())
        .await
        .expect("put");
    let new_data = data(20 * KIB as usize, 2);
    let new = store
        .put(&k1, new_data.clone(), &PutOptions::new())
        .await
        .expect("overwrite");
    store
        .put(&k2, data(100 * KIB as usize, 3), &PutOptions::new())
        .await
        .expect("put");
    store.delete(&k2).await.expect("delete");
    let opts = GcOptions::new().with_prefix(p.clone());

    let r = store.gc(&opts).await.expect("gc");
    assert_eq!(r.reclaim.versions, 0, "inside the grace period: {r:?}");
    assert!(r.reclaim.next_due_micros.is_some(), "{r:?}");
    let r = store
        .gc(&opts.clone().with_grace(Duration::ZERO).with_dry_run(true))
        .await
        .expect("dry run");
    assert_eq!((r.reclaim.versions, r.dry_run), (2, true), "{r:?}");
    assert_eq!(
        chunks_by_version(&backend, &k1).await.len(),
        2,
        "dry run deletes nothing"
    );

    let r = store
        .gc(&opts.clone().with_grace(Duration::ZERO))
        .await
        .expect("gc");
    assert_eq!(r.reclaim.versions, 2, "{r:?}");
    assert!(
        r.reclaim.bytes > 300 * KIB,
        "freed bytes are reported: {r:?}"
    );
    let left = chunks_by_version(&backend, &k1).await;
    assert_eq!(left.keys().copied().collect::<Vec<_>>(), vec![new.version]);
    assert!(!left.contains_key(&old.version));
    assert!(chunks_by_version(&backend, &k2).await.is_empty());
    assert_holds(&store, &k1, &new_data).await;
    let r = store
        .gc(&opts.with_grace(Duration::ZERO))
        .await
        .expect("gc again");
    assert_eq!(r.reclaim.versions, 0, "nothing left: {r:?}");
}

pub async fn gc_reclaims_abandoned_puts(backend: Arc<dyn ChunkStore>) {
    let p = prefix("gc-abandoned");
    let key = format!("{p}blob");
    let store = store(
        &backend,
        small_config().with_intent_lease(Duration::from_millis(400)),
    );
    let kept = data(10_000, 1);
    let committed = store
        .put(&key, kept.clone(), &PutOptions::new())
        .await
        .expect("put");
    let (w, put, abandoned) = running_put(
        &store,
        &backend,
        &key,
        committed.version,
        200 * KIB as usize,
        10,
    )
    .await;
    let opts = GcOptions::new().with_prefix(p.clone());
    // Stalled for longer than its lease, but alive: it renews, and gc leaves it alone.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let r = store.gc(&opts).await.expect("gc");
    assert_eq!((r.puts_in_flight, r.abandoned_puts), (1, 0), "{r:?}");
    assert!(
        chunks_by_version(&backend, &key)
            .await
            .contains_key(&abandoned)
    );

    // The writer dies: its intent is no longer renewed and expires.
    put.abort();
    drop(w);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let r = store.gc(&opts).await.expect("gc");
    assert_eq!((r.puts_in_flight, r.abandoned_puts), (0, 1), "{r:?}");
    assert!(
        r.abandoned_chunks > 0,
        "progress is recorded at renewals: {r:?}"
    );
    assert_eq!(r.reclaim.versions, 1, "{r:?}");
    let left = chunks_by_version(&backend, &key).await;
    assert_eq!(
        left.keys().copied().collect::<Vec<_>>(),
        vec![committed.version]
    );
    assert_holds(&store, &key, &kept).await;
    let r = store.gc(&opts).await.expect("gc again");
    assert_eq!((r.abandoned_puts, r.stale_intents), (0, 0), "{r:?}");
}

pub async fn put_without_its_lease_does_not_commit(backend: Arc<dyn ChunkStore>) {
    let p = prefix("lease");
    let key = format!("{p}blob");
    let store = store(
        &backend,
        small_config().with_intent_lease(Duration::from_millis(300)),
    );
    let kept = data(10_000, 1);
    let committed = store
        .put(&key, kept.clone(), &PutOptions::new())
        .await
        .expect("put");
    let (mut w, put, running) = running_put(
        &store,
        &backend,
        &key,
        committed.version,
        100 * KIB as usize,
        5,
    )
    .await;
    // Do what gc does to an expired intent: take it over (here: remove it) so that the writer cannot commit.
    let intents = backend
        .scan_records(Namespace::Intent, b"", None, 100_000)
        .await
        .expect("scan intents");
    let (record, _) = intents
        .into_iter()
        .find(|(k, _)| k.get(..16) == Some(&running.to_be_bytes()[..]))
        .expect("the running put has an intent");
    backend
        .delete_record(Namespace::Intent, &record, &Precondition::None)
        .await
        .expect("take over");
    tokio::time::sleep(Duration::from_millis(400)).await;
    w.write_all(&data(50 * KIB as usize, 3))
        .await
        .expect("feed the rest");
    drop(w);
    match put.await.expect("put task") {
        Err(Error::IntentLost { version, .. }) => assert_eq!(version, running),
        other => panic!("expected IntentLost, got {other:?}"),
    }
    assert_holds(&store, &key, &kept).await;
    let left = chunks_by_version(&backend, &key).await;
    assert_eq!(
        left.keys().copied().collect::<Vec<_>>(),
        vec![committed.version],
        "the failed put removed its chunks"
    );
}

pub async fn fsck_reports_damage_and_repairs_only_orphans(backend: Arc<dyn ChunkStore>) {
    let p = prefix("fsck");
    let store = store(&backend, small_config());
    let (a, b, c) = (format!("{p}a"), format!("{p}b"), format!("{p}c"));
    let sizes = [500usize, 200 * KIB as usize, 20 * KIB as usize];
    let mut manifests = Vec::new();
    for (i, (key, size)) in [&a, &b, &c].into_iter().zip(sizes).enumerate() {
        manifests.push(
            store
                .put(key, data(size, i as u64), &PutOptions::new())
                .await
                .expect("put"),
        );
    }
    let opts = FsckOptions::new().with_prefix(p.clone());
    let r = store.fsck(&opts).await.expect("fsck");
    assert_eq!(r.blobs, 3, "{r:?}");
    assert_eq!(r.bytes, sizes.iter().sum::<usize>() as u64);
    assert!(r.damaged.is_empty() && r.orphans.is_empty(), "{r:?}");
    assert_eq!(r.chunks, 50 + 5, "every chunk listed once: {r:?}");

    let blob = |key: &str, version| BlobRef {
        key: Bytes::copy_from_slice(key.as_bytes()),
        version,
    };
    // b: one bit of chunk 1 flipped in place.
    let Layout::Chunked(lb) = manifests[1].layout() else {
        panic!("b is chunked")
    };
    let bb = blob(&b, manifests[1].version);
    let one = ChunkId {
        salt: lb.salt_of(1),
        index: 1,
    };
    let mut flipped = backend
        .get_chunks(&bb, &[one])
        .await
        .expect("read b")
        .into_iter()
        .next()
        .flatten()
        .expect("chunk 1 of b")
        .to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    backend
        .put_chunks(
            &bb,
            vec![ChunkWrite {
                salt: one.salt,
                index: 1,
                data: Bytes::from(flipped),
            }],
        )
        .await
        .expect("damage b");
    // c: a second copy of chunk 0 under another salt.
    let cb = blob(&c, manifests[2].version);
    let zero = backend
        .get_chunks(&cb, &[ChunkId { salt: 0, index: 0 }])
        .await
        .expect("read c")
        .into_iter()
        .next()
        .flatten()
        .expect("chunk 0 of c");
    backend
        .put_chunks(
            &cb,
            vec![ChunkWrite {
                salt: 5,
                index: 0,
                data: zero,
            }],
        )
        .await
        .expect("stray copy");
    // d: chunks of a version nothing refers to, written long ago.
    let d = format!("{p}d");
    let ghost = VersionId((1u128 << 80) | 7);
    let ghost_chunks = (0..3)
        .map(|i| ChunkWrite {
            salt: i as u32,
            index: i,
            data: Bytes::from(vec![1u8; 100]),
        })
        .collect();
    backend
        .put_chunks(&blob(&d, ghost), ghost_chunks)
        .await
        .expect("orphan chunks");

    let r = store.fsck(&opts).await.expect("fsck");
    let damaged: Vec<(String, Option<VersionId>)> = r
        .damaged
        .iter()
        .map(|d| (String::from_utf8_lossy(&d.key).into_owned(), d.version))
        .collect();
    assert_eq!(
        damaged,
        vec![
            (b.clone(), Some(manifests[1].version)),
            (c.clone(), Some(manifests[2].version))
        ],
        "{r:?}"
    );
    assert!(r.damaged[0].problem.contains("checksum"), "{r:?}");
    assert!(r.damaged[1].problem.contains("salt 5"), "{r:?}");
    assert_eq!(r.orphans.len(), 1, "{r:?}");
    let o = &r.orphans[0];
    assert_eq!(
        (&o.key[..], o.version, o.chunks, o.reason, o.removed),
        (d.as_bytes(), ghost, 3, OrphanReason::Unreferenced, false)
    );

    let r = store
        .fsck(&opts.clone().with_repair(true).with_min_age(Duration::ZERO))
        .await
        .expect("repair");
    assert_eq!(r.orphans.len(), 1);
    assert!(r.orphans[0].removed, "{r:?}");
    assert_eq!(r.orphans_left(), 0);
    let r = store.fsck(&opts).await.expect("fsck after repair");
    assert!(r.orphans.is_empty(), "{r:?}");
    assert_eq!(
        r.damaged.len(),
        2,
        "repair touches nothing but orphans: {r:?}"
    );
    assert!(matches!(
        store.get(&b).await,
        Err(Error::ChecksumMismatch { chunk: 1, .. })
    ));
    assert_holds(&store, &c, &data(sizes[2], 2)).await;
}
