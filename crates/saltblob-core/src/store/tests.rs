//! Tests of `store/mod.rs`.

use super::*;
use crate::backend::Precondition;
use crate::backend::memory::MemoryStore;
use crate::format::layout::LayoutPolicy;
use crate::format::manifest::ManifestBody;
use crate::state::PAGE;
use crate::state::config::PutOptions;

/// A listing resumed after a key lists only the keys after it, across pages, and a marker before the prefix
/// or past its last key lists all or none.
#[tokio::test]
async fn list_stream_after_starts_past_its_marker() {
    let store =
        BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
    let total = PAGE + 3;
    for i in 0..total {
        store
            .put(format!("k{i:05}"), &b"v"[..], &PutOptions::new())
            .await
            .expect("put");
    }
    store
        .put("l", &b"v"[..], &PutOptions::new())
        .await
        .expect("put");
    let keys = async |after: Option<&str>| -> Vec<Bytes> {
        let after = after.map(|a| Bytes::copy_from_slice(a.as_bytes()));
        let listed: Vec<ListEntry> = store
            .list_stream_after(b"k", after)
            .try_collect()
            .await
            .expect("list");
        listed.into_iter().map(|e| e.key).collect()
    };
    let after_two = keys(Some("k00002")).await;
    assert_eq!(after_two.len(), total - 3);
    assert_eq!(after_two.first().map(|k| &k[..]), Some(&b"k00003"[..]));
    assert_eq!(
        after_two.last().map(|k| &k[..]),
        Some(format!("k{:05}", total - 1).as_bytes())
    );
    assert_eq!(keys(Some("a")).await.len(), total);
    assert_eq!(keys(None).await.len(), total);
    assert!(keys(Some(&format!("k{:05}", total - 1))).await.is_empty());
}

/// A page reads at most its limit (at least one record), counts an expired blob in `read` without listing it,
/// and names the last key read as where the next page starts, until a short page ends the listing.
#[tokio::test]
async fn list_page_reads_at_most_its_limit_and_says_where_to_go_on() {
    let backend = Arc::new(MemoryStore::new());
    let store = BlobStore::new(backend.clone(), StoreConfig::default()).expect("store");
    for key in ["k1", "k2", "k3", "k4", "k5"] {
        store
            .put(key, &b"v"[..], &PutOptions::new())
            .await
            .expect("put");
    }
    let expired = Manifest {
        expires_micros: Some(1),
        ..store.head("k2").await.expect("head")
    };
    backend
        .put_record(
            Namespace::Manifest,
            b"k2",
            expired.encode(),
            &Precondition::None,
        )
        .await
        .expect("expire");
    let keys =
        |page: &ListPage| -> Vec<Bytes> { page.entries.iter().map(|e| e.key.clone()).collect() };
    let first = store.list_page(b"k", None, 3).await.expect("page");
    assert_eq!(
        (first.read, keys(&first)),
        (3, vec![Bytes::from("k1"), Bytes::from("k3")])
    );
    assert_eq!(first.next, Some(Bytes::from("k3")));
    let last = store.list_page(b"k", first.next, 3).await.expect("page");
    assert_eq!(
        (last.read, keys(&last)),
        (2, vec![Bytes::from("k4"), Bytes::from("k5")])
    );
    assert_eq!(last.next, None);
    let one = store.list_page(b"k", None, 0).await.expect("page");
    assert_eq!((one.read, one.next), (1, Some(Bytes::from("k1"))));
}

/// The class of a blob's reads: the store's default class when it has one, else by layout.
#[tokio::test]
async fn class_of_is_the_store_default_else_the_layout() {
    let policy = LayoutPolicy::default();
    let small = vec![1u8; 10];
    let salted = vec![2u8; (policy.fanout_threshold + 1) as usize];
    let by_layout =
        BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
    let mut config = StoreConfig::default();
    config.scheduler = config.scheduler.with_default_class(PriorityClass::bulk());
    let all_bulk = BlobStore::new(Arc::new(MemoryStore::new()), config).expect("store");
    for (store, small_class) in [(&by_layout, "interactive"), (&all_bulk, "bulk")] {
        let m = store
            .put("s", small.clone(), &PutOptions::new())
            .await
            .expect("put");
        assert_eq!(store.class_of(&m).name(), small_class);
        let m = store
            .put("l", salted.clone(), &PutOptions::new())
            .await
            .expect("put");
        assert!(matches!(m.layout(), Layout::Chunked(l) if l.salt_count > 1));
        assert_eq!(store.class_of(&m).name(), "bulk");
    }
}

/// In a scope of `in_class`, an operation that names no class runs in the scope's (a small put in `bulk`), one
/// that names one in its own; outside the scope, the layout decides again.
#[tokio::test]
async fn in_class_scopes_the_operations_that_name_no_class() {
    let store =
        BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
    let admitted = |store: &BlobStore, name: &str| {
        store
            .scheduler_stats()
            .classes
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.admitted)
    };
    let small = PutOptions::new();
    let (bulk_before, interactive_before) =
        (admitted(&store, "bulk"), admitted(&store, "interactive"));
    store
        .in_class(PriorityClass::bulk(), async {
            store.put("scoped", &b"v"[..], &small).await.expect("put");
        })
        .await
        .expect("a known class");
    let bulk_scoped = admitted(&store, "bulk");
    assert!(bulk_scoped > bulk_before, "the scoped put ran in bulk");
    assert_eq!(
        admitted(&store, "interactive"),
        interactive_before,
        "and nothing of it in interactive"
    );

    let named = PutOptions::new().with_priority(PriorityClass::interactive());
    store
        .in_class(PriorityClass::bulk(), async {
            store.put("named", &b"v"[..], &named).await.expect("put");
        })
        .await
        .expect("a known class");
    assert!(
        admitted(&store, "interactive") > interactive_before,
        "a named class wins"
    );

    let interactive_now = admitted(&store, "interactive");
    store.put("outside", &b"v"[..], &small).await.expect("put");
    assert!(
        admitted(&store, "interactive") > interactive_now,
        "outside, by layout"
    );

    let err = store
        .in_class(PriorityClass::new("nightly").expect("a good name"), async {
        })
        .await
        .expect_err("an unknown class");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
}

/// An expired manifest in a full page of the scan does not end the listing early (it did when the listing
/// counted the entries it kept to tell a full page).
#[tokio::test]
async fn list_reads_past_a_page_with_an_expired_blob() {
    let backend = Arc::new(MemoryStore::new());
    let store = BlobStore::new(backend.clone(), StoreConfig::default()).expect("store");
    let total = PAGE + 10;
    for i in 0..total {
        let m = store
            .put(format!("k{i:05}"), &b"v"[..], &PutOptions::new())
            .await
            .expect("put");
        assert!(matches!(m.body, ManifestBody::Inline(_)));
    }
    let expired = Manifest {
        expires_micros: Some(1),
        ..store.head("k00001").await.expect("head")
    };
    backend
        .put_record(
            Namespace::Manifest,
            b"k00001",
            expired.encode(),
            &Precondition::None,
        )
        .await
        .expect("expire");
    let listed = store.list("k").await.expect("list");
    assert_eq!(listed.len(), total - 1);
}

/// A damaged manifest is listed with its error, and the keys after it are listed too, by every listing
/// call; deleting the key clears it.
#[tokio::test]
async fn a_damaged_manifest_is_reported_and_the_listing_goes_on() {
    let backend = Arc::new(MemoryStore::new());
    let store = BlobStore::new(backend.clone(), StoreConfig::default()).expect("store");
    for key in ["k1", "k2", "k3"] {
        store
            .put(key, &b"value"[..], &PutOptions::new())
            .await
            .expect("put");
    }
    backend
        .put_record(
            Namespace::Manifest,
            b"k2",
            Bytes::from_static(b"\x01not a manifest"),
            &Precondition::None,
        )
        .await
        .expect("damage k2");
    let check = |entries: Vec<ListEntry>| {
        let keys: Vec<&[u8]> = entries.iter().map(|e| &e.key[..]).collect();
        assert_eq!(keys, [&b"k1"[..], b"k2", b"k3"]);
        for entry in &entries {
            match (&entry.key[..], &entry.manifest) {
                (b"k2", Err(Error::Corrupt { what, .. })) => {
                    assert!(what.contains("\"k2\""), "{what}")
                }
                (b"k2", other) => panic!("k2 should be corrupt: {other:?}"),
                (_, manifest) => assert_eq!(manifest.as_ref().map(|m| m.size).ok(), Some(5)),
            }
        }
    };
    check(store.list("k").await.expect("list"));
    check(
        store
            .list_stream_after(b"k", Some(Bytes::from_static(b"a")))
            .try_collect()
            .await
            .expect("list_stream_after"),
    );
    check(
        store
            .list_stream(b"k")
            .try_collect()
            .await
            .expect("list_stream"),
    );
    store.delete("k2").await.expect("delete the damaged key");
    let entries = store.list("k").await.expect("list");
    assert_eq!(entries.len(), 2);
    assert!(entries.iter().all(|e| e.manifest.is_ok()));
}

#[test]
fn keys_are_validated() {
    assert!(matches!(validate_key(b""), Err(Error::InvalidKey { .. })));
    assert!(validate_key(&[b'k'; MAX_KEY_LEN]).is_ok());
    let err = validate_key(&[b'k'; MAX_KEY_LEN + 1])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("1025 bytes long"), "{err}");
}

/// A manifest whose chunk size this backend could never have stored is corrupt, whatever else it says,
/// and no read allocates by it.
#[tokio::test]
async fn a_chunk_size_beyond_the_backend_is_corrupt() {
    let backend = Arc::new(MemoryStore::new());
    let store = BlobStore::new(backend.clone(), StoreConfig::default()).expect("store");
    let chunk_size = crate::format::layout::MAX_CHUNK_SIZE; // the format allows it; memory's chunks are smaller
    let size = 3 * u64::from(chunk_size);
    let manifest = Manifest {
        sealing: None,
        version: VersionId::generate(),
        size,
        created_micros: crate::base::version::now_micros(),
        expires_micros: None,
        digest: [0; 32],
        body: ManifestBody::Chunked {
            layout: crate::format::layout::ChunkLayout {
                chunk_size,
                chunk_count: 3,
                salt_count: 1,
            },
            codec: crate::format::codec::Codec::None,
            stored_bytes: size,
        },
        content_type: None,
        metadata: Default::default(),
    };
    backend
        .put_record(
            Namespace::Manifest,
            b"big",
            manifest.encode(),
            &Precondition::None,
        )
        .await
        .expect("put record");
    for result in [
        store.head("big").await.map(|_| ()),
        store.get("big").await.map(|_| ()),
        store.describe("big").await.map(|_| ()),
    ] {
        match result {
            Err(Error::Corrupt { detail, .. }) => assert!(
                detail.contains("larger than the memory backend's largest chunk"),
                "{detail}"
            ),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
}

/// The chunk size of `key`'s current version.
async fn chunk_size_of(store: &BlobStore, key: &str) -> u32 {
    let d = store.describe(key).await.expect("describe");
    match d.manifest.layout() {
        Layout::Chunked(l) => l.chunk_size,
        Layout::Inline => panic!("{key} is inline"),
    }
}

/// Large blobs, including streams of unknown length past the look-ahead, take the large chunk size; a
/// per-put chunk size is used at every size; a large chunk bigger than the in-flight window still works.
#[tokio::test]
async fn the_chunk_size_follows_the_blob_size_unless_overridden() {
    let policy = LayoutPolicy::default()
        .with_fanout_threshold(256 * 1024)
        .with_large_chunk_size(512 * 1024);
    let config = StoreConfig::default()
        .with_policy(policy)
        .with_inflight_bytes(300 * 1024);
    let store = BlobStore::new(Arc::new(MemoryStore::new()), config).expect("store");
    let big = Bytes::from(
        (0..3_000_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<_>>(),
    );
    let opts = PutOptions::new();
    store
        .put("small", big.slice(..200_000), &opts)
        .await
        .expect("put");
    store.put("large", big.clone(), &opts).await.expect("put");
    store
        .put_stream("stream", &big[..], &opts)
        .await
        .expect("put_stream");
    let custom = PutOptions::new().with_chunk_size(8192);
    store
        .put("custom", big.clone(), &custom)
        .await
        .expect("put");
    for (key, chunk_size) in [
        ("small", 65536),
        ("large", 512 * 1024),
        ("stream", 512 * 1024),
        ("custom", 8192),
    ] {
        assert_eq!(chunk_size_of(&store, key).await, chunk_size, "{key}");
    }
    for key in ["large", "stream", "custom"] {
        assert_eq!(store.get(key).await.expect("get"), big, "{key}");
        let got = store
            .get_range(key, 524_000..1_049_000)
            .await
            .expect("range");
        assert_eq!(got, big.slice(524_000..1_049_000), "{key}");
    }
    let bad = PutOptions::new().with_chunk_size(100);
    let err = store
        .put("bad", big.clone(), &bad)
        .await
        .map_err(|e| e.to_string());
    assert!(err.expect_err("bad chunk size").contains("chunk size"));
}

/// An out-of-bounds large chunk size fails the store's creation, naming the option.
#[test]
fn a_bad_large_chunk_size_is_refused() {
    let policy = LayoutPolicy::default().with_large_chunk_size(128 << 20);
    let config = StoreConfig::default().with_policy(policy);
    let err = BlobStore::new(Arc::new(MemoryStore::new()), config).map(|_| ());
    let err = err.map_err(|e| e.to_string()).expect_err("refused");
    assert!(err.contains("large chunk size"), "{err}");
}
