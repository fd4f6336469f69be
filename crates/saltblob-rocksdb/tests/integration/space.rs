//! Compactions and the chunks' blob files: by default a compaction rewrites no live chunk of a store without
//! garbage; with `blob_gc=true` every compaction moves the chunks of the oldest blob files into new ones.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use saltblob_core::backend::ChunkStore;
use saltblob_core::{BlobStore, PutOptions, StoreConfig};
use saltblob_rocksdb::{RocksConfig, RocksStore};

/// The names of the store's RocksDB blob files.
fn blob_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("store directory")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.ends_with(".blob"))
        .collect()
}

/// Puts 24 small values (one chunk each, in blob files of 64 KiB: several files), then compacts the store twice
/// (`reclaim_space`: a flush, then a forced compaction of every family; no garbage, so no rewrite of its own);
/// returns the blob files after each compaction, after checking that every value reads back.
async fn compact_twice(config: RocksConfig) -> (BTreeSet<String>, BTreeSet<String>) {
    let dir = config.path.clone();
    let rocks = Arc::new(RocksStore::open(config).expect("open"));
    let store = BlobStore::new(
        Arc::clone(&rocks) as Arc<dyn ChunkStore>,
        StoreConfig::default().with_grace(Duration::ZERO),
    )
    .expect("store");
    let value = |i: usize| Bytes::from(vec![u8::try_from(i).unwrap_or(0); 40 << 10]);
    for i in 0..24 {
        store
            .put(format!("k{i}"), value(i), &PutOptions::new())
            .await
            .expect("put");
    }
    let compact = || async {
        let report = rocks
            .reclaim_space()
            .await
            .expect("compaction")
            .expect("the embedded store reports its space");
        assert!(
            !report.rewrote_live_data,
            "no garbage, no rewrite: {report:?}"
        );
        blob_files(&dir)
    };
    let first = compact().await;
    let second = compact().await;
    for i in 0..24 {
        let got = store.get(format!("k{i}")).await.expect("get");
        assert_eq!(got, value(i), "k{i}");
    }
    (first, second)
}

/// With the defaults, compacting again keeps every blob file; with `blob_gc=true` the same compaction replaces
/// the oldest ones (their live chunks rewritten into new files), although nothing was freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compactions_rewrite_live_chunks_only_with_blob_gc_on() {
    let small_files = |dir: &Path, blob_gc: bool| {
        let mut config = RocksConfig::new(dir);
        config.blob_file_size = 64 << 10;
        config.blob_gc = blob_gc;
        config
    };
    let default = tempfile::tempdir().expect("tempdir");
    assert!(!RocksConfig::new(default.path()).blob_gc, "off by default");
    let (first, second) = compact_twice(small_files(default.path(), false)).await;
    assert!(first.len() >= 4, "several blob files: {first:?}");
    assert_eq!(
        first, second,
        "a compaction without garbage rewrote blob files"
    );

    let on = tempfile::tempdir().expect("tempdir");
    let (first, second) = compact_twice(small_files(on.path(), true)).await;
    assert!(first.len() >= 4, "several blob files: {first:?}");
    assert!(
        first.difference(&second).next().is_some() && second.difference(&first).next().is_some(),
        "blob_gc=true: the oldest files replaced by new ones: {first:?} -> {second:?}"
    );
}
