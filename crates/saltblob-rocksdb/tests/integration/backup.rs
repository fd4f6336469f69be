//! Backups taken while writers write ([`ChunkStore::backup`]), judged by the history checker: each backup is
//! opened as a store of its own and every key read from it, each read checked as one that took effect at the
//! backup's instant (some time during the call). So a backup that misses an acknowledged write, shows a
//! replaced value, or holds a value torn or without its chunks or extent file, fails.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use saltblob_check::history::now_micros;
use saltblob_check::{
    MemorySink, OpMix, SizeMix, SnapshotSink, WorkloadConfig, check, final_reads, key_set, run,
};
use saltblob_core::conformance::small_config;
use saltblob_core::{BackupOptions, BlobStore, ChunkStore, FsckOptions, GcOptions};
use saltblob_rocksdb::{RocksConfig, RocksStore};

/// The store's configuration at `path`: values of 32 KiB and more in extent files, the others in RocksDB.
fn config(path: &Path) -> RocksConfig {
    let mut config = RocksConfig::new(path);
    config.extent_min_bytes = Some(32 << 10);
    config
}

/// A store at `path` with a short grace period, so that gc deletes replaced versions (extent files among them)
/// while backups are taken.
fn open(path: &Path) -> (Arc<RocksStore>, BlobStore) {
    let backend = Arc::new(RocksStore::open(config(path)).expect("open RocksDB"));
    let store = BlobStore::new(
        Arc::clone(&backend) as Arc<dyn ChunkStore>,
        small_config().with_grace(Duration::from_millis(200)),
    )
    .expect("store");
    (backend, store)
}

/// Writers, readers and a gc every 100 ms on 12 keys for 4 s; a backup into `backups/N` at 1, 2 and 3 s (into
/// `target_dir` when given, else beside the store); then each backup read whole, and the history checked.
async fn backups_under_load(copy: bool, target_dir: Option<&Path>) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (backend, store) = open(&dir.path().join("store"));
    let targets = match target_dir {
        Some(d) => d.to_path_buf(),
        None => dir.path().to_path_buf(),
    };
    let sink = MemorySink::new();
    let keys = key_set("b/", 12);
    let mut load = WorkloadConfig::new(keys.clone());
    load.clients = 8;
    load.sizes = SizeMix::boundaries(&store.config().policy, 300 << 10);
    load.mix = OpMix {
        put: 45,
        get: 35,
        delete: 10,
        conditional_put: 10,
    };
    load.duration = Some(Duration::from_secs(4));
    load.seed = now_micros();
    let gc = store.spawn_gc(Duration::from_millis(100), GcOptions::new());
    let writers = tokio::spawn({
        let (store, sink) = (store.clone(), Arc::new(sink.clone()));
        async move { run(store, &load, sink).await }
    });

    let mut backups = Vec::new();
    for n in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let dest = targets.join(format!("backup-{n}"));
        let from = now_micros();
        let report = backend
            .backup(&dest, &BackupOptions::new().with_copy(copy))
            .await
            .expect("backup")
            .expect("RocksDB takes backups");
        let to = now_micros();
        println!("backup {n}: {report:?}");
        assert!(report.engine_files > 0);
        backups.push((dest, from, to, report));
    }
    let stats = writers.await.expect("writers");
    drop(gc);
    assert!(stats.puts > 0, "the load did no work: {stats}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("store"))
        .expect("list the store")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("backup-staging-")
        })
        .collect();
    assert!(
        leftovers.is_empty(),
        "staging left in the store: {leftovers:?}"
    );

    let mut read_values = 0;
    let mut extent_files = 0;
    for (dest, from, to, report) in &backups {
        extent_files += report.extent_files;
        let expect_copied = copy || target_dir.is_some();
        assert_eq!(report.copied, expect_copied, "{dest:?}");
        let (_, restored) = open(dest);
        let snapshot = Arc::new(SnapshotSink::new(Arc::new(sink.clone()), *from, *to));
        let read = final_reads(restored.clone(), &keys, snapshot).await;
        read_values += read.gets_with_value;
        let fsck = restored.fsck(&FsckOptions::new()).await.expect("fsck");
        assert!(fsck.damaged.is_empty(), "{dest:?}: {:?}", fsck.damaged);
    }
    // The live store's own final state too.
    final_reads(store.clone(), &keys, Arc::new(sink.clone())).await;
    let report = check(&sink.history());
    println!(
        "{} backups ({extent_files} extent files, {read_values} values read back): {stats}; checker: {}",
        backups.len(),
        report.summary()
    );
    assert!(report.is_clean(), "{:#?}", report.violations);
    assert!(read_values > 0, "no backup held a value");
    assert!(extent_files > 0, "no backup held an extent file");
}

/// Backups on the store's file system, hard-linked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backups_under_writers_and_gc_hold_every_acknowledged_write() {
    backups_under_load(false, None).await;
}

/// The same, every file copied (`--copy`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copied_backups_under_writers_and_gc_hold_every_acknowledged_write() {
    backups_under_load(true, None).await;
}

/// Backups onto another file system (`/dev/shm`, a tmpfs, where the machine has one): copied there, since a
/// hard link cannot cross file systems.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backups_onto_another_file_system_are_copies() {
    let shm = Path::new("/dev/shm");
    let Ok(target) = tempfile::tempdir_in(shm) else {
        println!("no writable /dev/shm here: skipped");
        return;
    };
    backups_under_load(false, Some(target.path())).await;
}

/// A destination that exists is refused and left as it was; a failed backup leaves nothing in the store.
#[tokio::test]
async fn a_destination_that_exists_is_left_alone() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (backend, store) = open(&dir.path().join("store"));
    store
        .put("k", &b"v"[..], &saltblob_core::PutOptions::new())
        .await
        .expect("put");
    let dest = dir.path().join("taken");
    std::fs::create_dir(&dest).expect("dir");
    std::fs::write(dest.join("mine"), b"keep").expect("file");
    let e = backend
        .backup(&dest, &BackupOptions::new())
        .await
        .expect_err("refused");
    assert!(e.to_string().contains("it exists"), "{e}");
    assert_eq!(std::fs::read(dest.join("mine")).expect("read"), b"keep");
    let e = backend
        .backup(&dir.path().join("no/such/parent"), &BackupOptions::new())
        .await
        .expect_err("refused");
    assert!(e.to_string().contains("parent directory"), "{e}");
    let names: Vec<String> = std::fs::read_dir(dir.path().join("store"))
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("backup-staging-"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}
