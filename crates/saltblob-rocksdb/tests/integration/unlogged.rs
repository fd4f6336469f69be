//! Large puts that keep RocksDB's blob files (extent files off: `extent_min_bytes=off`) write their chunks
//! without the write-ahead log and flush them before they commit: a process killed (SIGKILL, no orderly close
//! that would flush the memtables) right after such a commit keeps the blob whole, and the log did not carry its
//! bytes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use saltblob_core::backend::ChunkStore;
use saltblob_core::{BlobStore, PutOptions, StoreConfig};
use saltblob_rocksdb::{RocksConfig, RocksStore};

/// Environment variable that makes the child run (the directory to work in).
const CHILD_ENV: &str = "SALTBLOB_UNLOGGED_CHILD";
/// Above the default unlogged threshold (8 MiB) and the 16 MiB memtable: one memtable fills and is flushed on
/// its own, the rest stays in the active memtable until the put's flush.
const SIZE: usize = 24 << 20;
/// Longest wait for the child's commit.
const COMMIT_WAIT: Duration = Duration::from_secs(120);

fn value() -> Bytes {
    Bytes::from(
        (0..SIZE)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect::<Vec<_>>(),
    )
}

/// The default configuration with extent files off: large puts take the unlogged blob-file path.
fn blob_files_config(dir: &Path) -> RocksConfig {
    let mut config = RocksConfig::new(dir);
    config.extent_min_bytes = None;
    config
}

/// Bytes of the write-ahead log files in `dir`.
fn wal_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read store dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum()
}

/// The child: puts the value, reports the log's size and the flushes after the commit in `dir/committed`, then
/// waits to be killed. Not a test on its own (it returns at once without the environment variable).
#[test]
#[ignore = "the child process of a_killed_process_keeps_its_committed_large_put; run by it"]
fn unlogged_put_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store_dir = dir.join("store");
        let rocks = Arc::new(RocksStore::open(blob_files_config(&store_dir)).expect("open"));
        let store = BlobStore::new(
            Arc::clone(&rocks) as Arc<dyn ChunkStore>,
            StoreConfig::default(),
        )
        .expect("store");
        store
            .put("large", value(), &PutOptions::new())
            .await
            .expect("put");
        let report = format!("{} {}", wal_bytes(&store_dir), rocks.unlogged_flushes());
        std::fs::write(dir.join("committed.tmp"), report).expect("report");
        std::fs::rename(dir.join("committed.tmp"), dir.join("committed")).expect("report");
        tokio::time::sleep(Duration::from_secs(600)).await;
    });
}

#[test]
fn a_killed_process_keeps_its_committed_large_put() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = crate::child_until(
        "unlogged::unlogged_put_child",
        CHILD_ENV,
        dir.path(),
        "committed",
        COMMIT_WAIT,
    );
    let report = dir.path().join("committed");
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let rocks = RocksStore::open(blob_files_config(&dir.path().join("store"))).expect("reopen");
        let store = BlobStore::new(Arc::new(rocks), StoreConfig::default()).expect("store");
        let got = store
            .get("large")
            .await
            .expect("the committed put survives");
        assert!(got == value(), "the blob came back different");
    });

    let report = std::fs::read_to_string(&report).expect("read report");
    let (wal, flushes) = report.split_once(' ').expect("two figures");
    let (wal, flushes): (u64, u64) = (wal.parse().expect("wal"), flushes.parse().expect("flushes"));
    assert!(
        wal < (SIZE / 8) as u64,
        "the write-ahead log holds {wal} bytes after a {SIZE}-byte put: its chunks were logged"
    );
    assert_eq!(flushes, 1, "one flush before the commit");
}
