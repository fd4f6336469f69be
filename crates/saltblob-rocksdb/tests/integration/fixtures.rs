//! The committed fixture of database format 2 (`tests/fixtures/store-format2/`): a store written by the build
//! that introduced extent files, holding blobs in an extent file (stored as is, and zstd-compressed), in
//! RocksDB's blob files, and inline. Every later build must read it back: `docs/format.md` is the contract, and
//! this is its example on disk. `write_the_format2_fixture` (ignored) wrote it; run it only for a new format.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use saltblob_core::backend::ChunkStore;
use saltblob_core::{BlobRef, BlobStore, Codec, PutOptions, StoreConfig};
use saltblob_rocksdb::{RocksConfig, RocksStore};

/// The blobs of the fixture: key, size, chunk size, codec, where they are stored.
const BLOBS: [(&str, usize, u32, Codec, &str); 4] = [
    ("fixture/extent-raw", 40_000, 4096, Codec::None, "extent"),
    ("fixture/extent-zstd", 30_000, 4096, Codec::Zstd, "extent"),
    (
        "fixture/blob-files",
        50_000,
        4096,
        Codec::None,
        "blob files",
    ),
    ("fixture/inline", 100, 4096, Codec::None, "manifest"),
];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-format2")
}

/// The bytes of blob `i`: the raw ones random-looking, the zstd one compressible.
fn content(i: usize, len: usize) -> Bytes {
    let mut state = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    Bytes::from(
        (0..len)
            .map(|n| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                if BLOBS[i].3 == Codec::Zstd {
                    b"saltblob extent fixture "[n % 24]
                } else {
                    state as u8
                }
            })
            .collect::<Vec<_>>(),
    )
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read fixture") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Writes the fixture (only for a new format: `SALTBLOB_WRITE_FIXTURE=1 cargo test … -- --ignored
/// write_the_format2_fixture`). The two extent blobs go to extent files (`extent_min_bytes=0`), the others
/// to blob files (they are written with extent files off), and the store is closed cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes tests/fixtures/store-format2; run by hand for a new format"]
async fn write_the_format2_fixture() {
    if std::env::var_os("SALTBLOB_WRITE_FIXTURE").is_none() {
        return;
    }
    let dir = fixture_dir();
    let _ = std::fs::remove_dir_all(&dir);
    for (extents, picks) in [(false, [2usize, 3]), (true, [0, 1])] {
        let mut config = RocksConfig::new(&dir);
        config.extent_min_bytes = extents.then_some(0);
        let rocks = Arc::new(RocksStore::open(config).expect("open"));
        let store = BlobStore::new(
            Arc::clone(&rocks) as Arc<dyn ChunkStore>,
            StoreConfig::default(),
        )
        .expect("store");
        for i in picks {
            let (key, len, chunk, codec, _) = BLOBS[i];
            let opts = PutOptions::new().with_chunk_size(chunk).with_codec(codec);
            store.put(key, content(i, len), &opts).await.expect("put");
        }
        rocks.flush().expect("flush");
    }
    for entry in std::fs::read_dir(&dir).expect("list") {
        let name = entry.expect("entry").file_name();
        let name = name.to_string_lossy();
        if name.starts_with("LOG") || name == "LOCK" {
            let _ = std::fs::remove_file(dir.join(&*name));
        }
    }
}

/// The fixture opens with this build's defaults, every blob reads back whole (ranges too), each from where
/// it was stored; the extent files' headers name their blobs; fsck finds the store clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_committed_format2_fixture_reads_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixture_dir(), tmp.path());
    let rocks = Arc::new(RocksStore::open(RocksConfig::new(tmp.path())).expect("open the fixture"));
    let store = BlobStore::new(
        Arc::clone(&rocks) as Arc<dyn ChunkStore>,
        StoreConfig::default(),
    )
    .expect("store");
    for (i, (key, len, _, _, storage)) in BLOBS.iter().enumerate() {
        let expected = content(i, *len);
        assert_eq!(store.get(key).await.expect(key), expected, "{key}");
        let range = (*len as u64 / 3)..(*len as u64 / 2);
        assert_eq!(
            store.get_range(key, range.clone()).await.expect(key),
            expected.slice(range.start as usize..range.end as usize),
            "{key} {range:?}"
        );
        let d = store.describe(key).await.expect("describe");
        let shown = d.storage.as_deref().unwrap_or("manifest");
        assert_eq!(shown, *storage, "{key}");
        if *storage == "extent" {
            let blob = BlobRef {
                key: Bytes::from_static(key.as_bytes()),
                version: d.manifest.version,
            };
            let bytes = std::fs::read(rocks.extent_path(&blob)).expect("extent file");
            assert_eq!(&bytes[..8], b"SBEXTENT");
            assert_eq!(bytes[8], 1, "extent format 1");
            assert_eq!(&bytes[40..40 + key.len()], key.as_bytes());
        }
    }
    let fsck = store
        .fsck(&saltblob_core::FsckOptions::new())
        .await
        .expect("fsck");
    assert!(
        fsck.damaged.is_empty() && fsck.orphans.is_empty(),
        "{fsck:?}"
    );
    assert_eq!(fsck.version_files, 2);
    assert_eq!(fsck.blobs, 4);
}
