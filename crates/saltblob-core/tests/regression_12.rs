//! Regression tests of issue 12, item 12: arithmetic on values from storage or the user does not wrap in
//! release builds (where it did silently, and `fsck --repair` then misreported or removed what it should not).
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use saltblob_core::{
    BlobRef, BlobStore, ChunkStore, ChunkWrite, FsckOptions, FsckReport, MemoryStore, StoreConfig,
    VersionId,
};

/// Stores one chunk of `blob` at `salt` with no manifest (an orphan), runs `fsck --repair` with `min_age`,
/// and returns its report and how many chunks are left.
async fn repair_orphan(blob: BlobRef, salt: u32, min_age: Duration) -> (FsckReport, usize) {
    let backend = Arc::new(MemoryStore::new());
    let store = BlobStore::new(backend.clone(), StoreConfig::default()).expect("store");
    let chunk = ChunkWrite {
        salt,
        index: 0,
        data: Bytes::from_static(b"orphan"),
    };
    backend
        .put_chunks(&blob, vec![chunk])
        .await
        .expect("put chunk");
    let report = store
        .fsck(&FsckOptions::new().with_repair(true).with_min_age(min_age))
        .await
        .expect("fsck");
    let left = backend.scan_chunks().count().await;
    (report, left)
}

/// A stored salt of `u32::MAX` (no layout has one): `max_salt + 1` wrapped to 0, the repair deleted nothing
/// and reported the orphan removed. Now it is reported and left.
#[tokio::test]
async fn fsck_does_not_claim_to_remove_an_orphan_it_cannot_name() {
    let old = BlobRef {
        key: Bytes::from_static(b"k"),
        version: VersionId(1),
    };
    let (report, left) = repair_orphan(old, u32::MAX, Duration::ZERO).await;
    assert_eq!((report.orphans.len(), left), (1, 1), "{report:?}");
    assert_eq!(report.orphans_left(), left, "the report says what is left");
}

/// A `min_age` past the end of time keeps every orphan: `version time + min_age` wrapped to a small number and
/// made a fresh orphan look old enough to remove.
#[tokio::test]
async fn fsck_with_the_largest_min_age_removes_nothing() {
    let fresh = BlobRef {
        key: Bytes::from_static(b"k"),
        version: VersionId::generate(),
    };
    let (report, left) = repair_orphan(fresh, 0, Duration::MAX).await;
    assert_eq!((report.orphans.len(), left), (1, 1), "{report:?}");
    assert_eq!(report.orphans_left(), 1);

    // The same orphan at min_age 0 goes: the test can tell removal apart.
    let fresh = BlobRef {
        key: Bytes::from_static(b"k"),
        version: VersionId::generate(),
    };
    let (report, left) = repair_orphan(fresh, 0, Duration::ZERO).await;
    assert_eq!((report.orphans_left(), left), (0, 0), "{report:?}");
}
