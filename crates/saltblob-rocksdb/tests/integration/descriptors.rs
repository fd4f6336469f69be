//! A write that runs out of file descriptors inside RocksDB (a flush that cannot open its table file) leaves the
//! engine taking no write: RocksDB treats it as fatal, and its C API has no `Resume`. The store reopens its engine
//! once descriptors are free again, without a restart, and loses nothing it acknowledged; reads go on meanwhile.
//!
//! The limit is lowered with `setrlimit`, which holds for the whole process: the store runs in a child process
//! (this test binary, run again), so that no other test meets the limit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use saltblob_core::backend::ChunkStore;
use saltblob_core::{BlobStore, PutOptions, StoreConfig};
use saltblob_rocksdb::{RocksConfig, RocksStore};

/// Environment variable that makes the child run (the directory to work in).
const CHILD_ENV: &str = "SALTBLOB_OUT_OF_FDS_CHILD";
/// Keys put before the descriptors run out.
const BEFORE: usize = 20;
/// Longest wait for writes to be taken again once descriptors are free.
const RESUME_WAIT: Duration = Duration::from_secs(30);

/// The value put under `key`: its own name, repeated (small: inline in the manifest, through the log).
fn value(key: &str) -> Bytes {
    Bytes::from(key.repeat(32))
}

/// Descriptors open in this process.
fn open_descriptors() -> u64 {
    let listing = std::fs::read_dir("/proc/self/fd").expect("list /proc/self/fd");
    // The listing's own descriptor is counted too, and closed once it is dropped.
    listing.count() as u64 - 1
}

/// Sets the soft limit on open files, keeping the hard one.
fn set_soft_limit(soft: u64) {
    let hard = getrlimit(Resource::Nofile).maximum;
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(soft),
            maximum: hard,
        },
    )
    .expect("setrlimit");
}

fn open_store(dir: &Path) -> (Arc<RocksStore>, BlobStore) {
    let rocks = Arc::new(RocksStore::open(RocksConfig::new(dir.join("store"))).expect("open"));
    let store = BlobStore::new(
        Arc::clone(&rocks) as Arc<dyn ChunkStore>,
        StoreConfig::default(),
    )
    .expect("store");
    (rocks, store)
}

/// The child: puts [`BEFORE`] keys, takes away every free descriptor, has a flush fail on it, checks that writes
/// are refused (retryably) and reads go on, gives the descriptors back and waits for a put to be taken again;
/// then every acknowledged key must read back. Writes the acknowledged keys to `dir/acknowledged`. Not a test on
/// its own (it returns at once without the environment variable).
#[test]
#[ignore = "the child process of a_store_out_of_descriptors_takes_writes_again_once_they_are_free; run by it"]
fn out_of_descriptors_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (rocks, store) = open_store(&dir);
        let mut acknowledged = Vec::new();
        for i in 0..BEFORE {
            let key = format!("before-{i}");
            store
                .put(&key, value(&key), &PutOptions::new())
                .await
                .expect("put before the shortage");
            acknowledged.push(key);
        }

        let soft = getrlimit(Resource::Nofile)
            .current
            .expect("a soft limit on open files");
        set_soft_limit(open_descriptors());
        // The memtables are flushed into table files, which cannot be opened.
        let failed = rocks
            .flush()
            .expect_err("a flush with no descriptor left to open its table file");
        println!("flush without descriptors: {failed}");
        assert!(
            failed.to_string().contains("Too many open files"),
            "not the shortage: {failed}"
        );
        let refused = store
            .put("refused", value("refused"), &PutOptions::new())
            .await
            .expect_err("RocksDB takes no write after a flush failed that way");
        println!("put without descriptors: {refused}");
        assert!(
            refused.is_retryable(),
            "a write refused for want of descriptors must say a retry helps: {refused}"
        );
        for key in &acknowledged {
            let got = store
                .get(key)
                .await
                .expect("reads go on without descriptors");
            assert!(got == value(key), "{key} read back different");
        }
        assert_eq!(rocks.engine_reopens(), 0, "reopened without descriptors");

        set_soft_limit(soft);
        let freed = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match store.put("after", value("after"), &PutOptions::new()).await {
                Ok(_) => break,
                Err(e) => {
                    assert!(
                        freed.elapsed() < RESUME_WAIT,
                        "no write taken {RESUME_WAIT:?} after the descriptors were freed \
                         ({attempts} attempts): {e}"
                    );
                    assert!(e.is_retryable(), "a refusal that says not to retry: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        println!(
            "writes taken again {:?} after the descriptors were freed ({attempts} attempts)",
            freed.elapsed()
        );
        acknowledged.push("after".to_owned());
        assert_eq!(rocks.engine_reopens(), 1, "one reopen of the engine");
        for key in &acknowledged {
            let got = store.get(key).await.expect("read after the reopen");
            assert!(
                got == value(key),
                "{key} read back different after the reopen"
            );
        }
        rocks.flush().expect("a flush after the reopen");
        std::fs::write(dir.join("acknowledged"), acknowledged.join("\n")).expect("report");
    });
}

#[test]
fn a_store_out_of_descriptors_takes_writes_again_once_they_are_free() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "descriptors::out_of_descriptors_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, dir.path())
        .output()
        .expect("run the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{text}");
    assert!(output.status.success(), "the child failed: {text}");
    let acknowledged =
        std::fs::read_to_string(dir.path().join("acknowledged")).expect("the child's report");

    // Nothing acknowledged is lost for a later process either.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (_rocks, store) = open_store(dir.path());
        let keys: Vec<&str> = acknowledged.lines().collect();
        assert_eq!(keys.len(), BEFORE + 1);
        for key in keys {
            let got = store.get(key).await.expect("read in a new process");
            assert!(got == value(key), "{key} read back different");
        }
    });
}
