//! Sealed blobs on a real Cassandra node leave no plaintext in its SSTables (after a flush) or its commit log:
//! a marker written sealed through every layout is found nowhere under the node's directory, while the same
//! kind of marker written in plaintext is (so the search can fail). Needs the node of `scripts/cassandra.sh`
//! (its directory, `SALTBLOB_CASSANDRA_WORK`, default `/tmp/saltblob-cassandra`, and its `nodetool`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use saltblob_core::conformance::encryption::{TempKeyring, marked_with, sealed_config, shows};
use saltblob_core::{BlobStore, PutOptions};

const SEALED: &[u8] = b"SALTBLOB-CQL-SEALED-MARKER";
const PLAIN: &[u8] = b"SALTBLOB-CQL-PLAIN-CONTROL";

/// The files under `dir` that hold `marker`.
fn files_holding(dir: &Path, marker: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()) {
            if path.is_dir() {
                todo.push(path);
            } else if std::fs::read(&path).is_ok_and(|b| shows(marker, &b)) {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the node of scripts/cassandra.sh: set TEST_CQL and pass --include-ignored"]
async fn sealed_blobs_leave_no_plaintext_in_sstables_or_the_commit_log() {
    let work = std::env::var("SALTBLOB_CASSANDRA_WORK").unwrap_or("/tmp/saltblob-cassandra".into());
    let node = Path::new(&work).join("node1");
    assert!(
        node.join("data").is_dir(),
        "{} has no data directory: this test reads the files of the node scripts/cassandra.sh started",
        node.display()
    );
    let ring = TempKeyring::new();
    let backend = Arc::new(crate::connect("").await);
    let sealed = BlobStore::new(backend.clone(), sealed_config(&ring, Some("tenant-a"))).unwrap();
    let plain = BlobStore::new(backend, saltblob_core::conformance::small_config()).unwrap();
    let prefix = saltblob_core::conformance::prefix("sealed-files");
    // Inline, single-partition and salted under the small policy.
    for (i, size) in [500usize, 20_000, 300_000].into_iter().enumerate() {
        let key = format!("{prefix}{size}");
        let value = marked_with(SEALED, size, i as u64);
        sealed
            .put(&key, value.clone(), &PutOptions::new())
            .await
            .unwrap();
        assert!(sealed.get(&key).await.unwrap() == value, "{key}");
    }
    plain
        .put(
            format!("{prefix}control"),
            marked_with(PLAIN, 20_000, 9),
            &PutOptions::new(),
        )
        .await
        .unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cassandra.sh");
    let flush = std::process::Command::new(&script)
        .args(["nodetool", "1", "flush", crate::keyspace()])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(
        flush.status.success(),
        "nodetool flush: {}",
        String::from_utf8_lossy(&flush.stderr)
    );
    let sstables = node.join("data").join(crate::keyspace());
    let commitlog = node.join("commitlog");
    let control: Vec<_> = [&sstables, &commitlog]
        .iter()
        .flat_map(|d| files_holding(d, PLAIN))
        .collect();
    assert!(
        !control.is_empty(),
        "the plaintext control marker is nowhere under {}: the search finds nothing",
        node.display()
    );
    let leaked: Vec<_> = [&sstables, &commitlog]
        .iter()
        .flat_map(|d| files_holding(d, SEALED))
        .collect();
    assert!(leaked.is_empty(), "plaintext of sealed blobs in {leaked:?}");
    println!(
        "sealed marker in no file of {} or {}; the plaintext control in {} file(s)",
        sstables.display(),
        commitlog.display(),
        control.len()
    );
}
