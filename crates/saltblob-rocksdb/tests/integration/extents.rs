//! Extent files: large versions in files of their own, with RocksDB as their index. Where they go and what
//! reads them back (within the store's read-ahead budget); replaced and deleted versions' files unlinked by reclaim; a truncated file, foreign and
//! read-only files in the directory; a process killed between the extent's sync and the commit; fsck's orphan
//! files; extent I/O standing back while synced commits are pending; the committed format fixture.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use saltblob_core::backend::ChunkStore;
use saltblob_core::{
    BlobRef, BlobStore, ChunkStoreLayer, Error, FsckOptions, GcOptions, PutOptions, StoreConfig,
};
use saltblob_rocksdb::{RocksConfig, RocksStore};

/// Above the default extent threshold (8 MiB), and not a whole number of chunks.
const LARGE: usize = (20 << 20) + 12_345;

fn value(len: usize, seed: u64) -> Bytes {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    Bytes::from(
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect::<Vec<_>>(),
    )
}

/// A store on a RocksDB directory, grace period zero.
fn open(path: &Path) -> (Arc<RocksStore>, BlobStore) {
    open_with(RocksConfig::new(path))
}

fn open_with(config: RocksConfig) -> (Arc<RocksStore>, BlobStore) {
    let rocks = Arc::new(RocksStore::open(config).expect("open"));
    let store = BlobStore::new(
        Arc::clone(&rocks) as Arc<dyn ChunkStore>,
        StoreConfig::default().with_grace(Duration::ZERO),
    )
    .expect("store");
    (rocks, store)
}

/// The files of the extent directory.
fn extent_files(store_dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(store_dir.join("extents"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

fn blob(key: &str, m: &saltblob_core::Manifest) -> BlobRef {
    BlobRef {
        key: Bytes::copy_from_slice(key.as_bytes()),
        version: m.version,
    }
}

/// A fresh store (in `dir`) holding key `big`, a large blob of `value(LARGE, seed)` in an extent file; returns
/// the stores, the bytes and the path of the extent file.
async fn store_with_big(dir: &Path, seed: u64) -> (Arc<RocksStore>, BlobStore, Bytes, PathBuf) {
    let (rocks, store) = open(dir);
    let large = value(LARGE, seed);
    let m = store
        .put("big", large.clone(), &PutOptions::new())
        .await
        .expect("put");
    let path = rocks.extent_path(&blob("big", &m));
    (rocks, store, large, path)
}

/// `fsck --repair` of every orphan, however young.
async fn repair(store: &BlobStore) -> saltblob_core::FsckReport {
    let opts = FsckOptions::new()
        .with_repair(true)
        .with_min_age(Duration::ZERO);
    store.fsck(&opts).await.expect("fsck --repair")
}

/// A large put goes to an extent file of its version (pre-sized, trimmed to its data), small ones to RocksDB's
/// blob files; both read back whole and by ranges; an overwrite keeps the old file until it is reclaimed, and
/// a delete's reclaim unlinks the last one. A stream of unknown length goes to an extent too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_versions_live_in_extent_files_until_reclaimed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rocks, store, large, path1) = store_with_big(dir.path(), 1).await;
    let small = value(3 << 20, 2);
    store
        .put("small", small.clone(), &PutOptions::new())
        .await
        .expect("put small");
    assert_eq!(extent_files(dir.path()), vec![path1.clone()], "one extent");
    let len = std::fs::metadata(&path1).expect("extent").len();
    let chunks = LARGE.div_ceil(64 << 10) as u64;
    let records = LARGE as u64 + 12 * chunks;
    assert!(
        len >= records + 4096 && len < records + 4096 + 4096,
        "{len} bytes for {records} of records: pre-sized to the data, header and alignment"
    );
    assert_eq!(
        store
            .describe("big")
            .await
            .expect("describe")
            .storage
            .as_deref(),
        Some("extent")
    );
    assert_eq!(
        store
            .describe("small")
            .await
            .expect("describe")
            .storage
            .as_deref(),
        Some("blob files")
    );
    assert_eq!(store.get("big").await.expect("get"), large);
    assert_eq!(store.get("small").await.expect("get"), small);
    for range in [
        0..1,
        65_535..65_537,
        5_000_000..5_300_000,
        (LARGE - 10) as u64..LARGE as u64,
    ] {
        let got = store.get_range("big", range.clone()).await.expect("range");
        let (s, e) = (range.start as usize, range.end as usize);
        assert_eq!(got, large.slice(s..e), "range {range:?}");
    }

    // A stream of unknown length: the file grows in steps, then is trimmed to its data.
    let streamed = value(LARGE + 3, 3);
    let m2 = store
        .put_stream("big", &streamed[..], &PutOptions::new())
        .await
        .expect("stream");
    let path2 = rocks.extent_path(&blob("big", &m2));
    assert_eq!(store.get("big").await.expect("get"), streamed);
    let len2 = std::fs::metadata(&path2).expect("extent 2").len();
    assert!(len2 < (LARGE as u64) + (1 << 20), "{len2}: trimmed");
    assert!(
        path1.exists(),
        "the replaced version's file stays until reclaimed"
    );
    store.reclaim_all().await.expect("reclaim");
    assert_eq!(
        extent_files(dir.path()),
        vec![path2.clone()],
        "replaced file unlinked"
    );

    store.delete("big").await.expect("delete");
    store.reclaim_all().await.expect("reclaim");
    assert!(extent_files(dir.path()).is_empty(), "deleted file unlinked");
    let fsck = store.fsck(&FsckOptions::new()).await.expect("fsck");
    assert!(
        fsck.damaged.is_empty() && fsck.orphans.is_empty(),
        "{fsck:?}"
    );
}

/// A gc pass's space report counts the extent files it unlinked: replacing a large version and reclaiming the
/// old one reports at least that file's blocks freed (its reclaim pass unlinks the file before the report
/// measures the directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_reports_the_extent_space_it_freed() {
    use std::os::unix::fs::MetadataExt;

    let dir = tempfile::tempdir().expect("tempdir");
    let (_rocks, store, _, old) = store_with_big(dir.path(), 11).await;
    let old_bytes = std::fs::metadata(&old).expect("extent").blocks() * 512;
    store
        .put("big", value(LARGE, 12), &PutOptions::new())
        .await
        .expect("overwrite");
    let gc = GcOptions::new().with_grace(Duration::ZERO);
    let report = store.gc(&gc).await.expect("gc");
    assert!(!old.exists(), "the replaced version's file was unlinked");
    let space = report.space.expect("the embedded store reports its space");
    let live = extent_files(dir.path());
    assert_eq!(live.len(), 1);
    let live_bytes = std::fs::metadata(&live[0]).expect("extent").blocks() * 512;
    assert!(
        space.bytes_before >= old_bytes + live_bytes && space.bytes_after >= live_bytes,
        "before: both extent files ({old_bytes} + {live_bytes} bytes), after: the live one: {space:?}"
    );
    // RocksDB's own files may grow by a few KiB as the pass compacts them.
    let freed = space.bytes_before.saturating_sub(space.bytes_after);
    assert!(
        freed + (1 << 20) >= old_bytes,
        "{freed} bytes reported freed; the unlinked extent held {old_bytes}: {space:?}"
    );
}

/// Extent I/O stands back while synced commits are pending (`extent_yield_ms`): a large put and a large get,
/// each beside loops of small synced puts, both wait at the gate, and read back whole; with the gate off
/// (`extent_yield_ms=0`) nothing waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extent_io_stands_back_while_synced_commits_are_pending() {
    let dir = tempfile::tempdir().expect("tempdir");
    for yield_ms in [200, 0] {
        let config = RocksConfig::from_url(&format!(
            "rocksdb://{}/s{yield_ms}?extent_yield_ms={yield_ms}",
            dir.path().display()
        ))
        .expect("url");
        let (rocks, store) = open_with(config);
        let large = value(LARGE, 21);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let small_puts = |n: usize| {
            let (store, stop) = (store.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut puts = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    store
                        .put(
                            format!("small/{n}"),
                            vec![n as u8; 4096],
                            &PutOptions::new(),
                        )
                        .await
                        .expect("small put");
                    puts += 1;
                }
                puts
            })
        };
        let loops: Vec<_> = (0..4).map(small_puts).collect();
        store
            .put("big", large.clone(), &PutOptions::new())
            .await
            .expect("large put");
        let after_put = rocks.extent_stood_back();
        let got = store.get("big").await.expect("large get");
        let after_get = rocks.extent_stood_back();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for l in loops {
            assert!(l.await.expect("loop") > 0, "the small puts ran");
        }
        assert!(got == large, "the large value reads back whole");
        if yield_ms > 0 {
            assert!(
                after_put.0 > 0,
                "the large put's writes stood back: {after_put:?}"
            );
            assert!(
                after_get.0 > after_put.0,
                "the large get's reads stood back: {after_put:?} then {after_get:?}"
            );
            assert!(
                after_get.1
                    <= Duration::from_millis(200) * u32::try_from(after_get.0).expect("count"),
                "each stood back at most the gate's wait: {after_get:?}"
            );
        } else {
            assert_eq!(after_get, (0, Duration::ZERO), "the gate is off");
        }
    }
}

/// An extent file cut short is reported as corruption naming the file and the chunk, not read as data:
/// ranges whose records lie before the cut still read, fsck reports the blob damaged, and the key can be deleted and its file
/// reclaimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_extent_is_reported_as_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (large, path) = {
        let (_rocks, _store, large, path) = store_with_big(dir.path(), 4).await;
        (large, path)
    };
    let cut = 8 << 20;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(cut))
        .expect("truncate");
    let (_rocks, store) = open(dir.path());
    let err = store.get("big").await.expect_err("truncated");
    let text = err.to_string();
    assert!(
        matches!(err, Error::Corrupt { .. })
            && text.contains("truncated")
            && text.contains(&path.display().to_string()),
        "{text}"
    );
    // Records lie in the file in the order they arrived (several chunks are written at once), so which chunks lie
    // before the cut varies from run to run: each 64 KiB span reads back whole or fails as truncated, and the
    // 8 MiB before the cut hold some of them.
    let span = 64 << 10;
    let mut whole = 0;
    for start in (0..large.len()).step_by(span) {
        let end = (start + span).min(large.len());
        match store.get_range("big", start as u64..end as u64).await {
            Ok(got) => {
                assert_eq!(got, large.slice(start..end), "bytes {start}..{end}");
                whole += 1;
            }
            Err(e) => assert!(
                matches!(e, Error::Corrupt { .. }) && e.to_string().contains("truncated"),
                "bytes {start}..{end}: {e}"
            ),
        }
    }
    assert!(whole > 0, "no span before the cut read back");
    let fsck = store.fsck(&FsckOptions::new()).await.expect("fsck");
    assert_eq!(fsck.damaged.len(), 1, "{fsck:?}");
    assert!(fsck.damaged[0].problem.contains("truncated"), "{fsck:?}");
    store.delete("big").await.expect("delete");
    store.reclaim_all().await.expect("reclaim");
    assert!(!path.exists(), "the damaged file goes with its version");
}

/// Reads of extent files take their read-ahead from the store's one budget, like reads of chunks in RocksDB's
/// blob files: readers that stop after their first piece hold at most the budget plus one batch (one extent
/// I/O, 1 MiB) each, not a window (16 MiB) each; each then reads its blob whole, and the budget is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extent_reads_share_the_read_ahead_budget() {
    const READERS: u64 = 4;
    const BUDGET: u64 = 4 << 20;
    const BATCH: u64 = 1 << 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let rocks = Arc::new(RocksStore::open(RocksConfig::new(dir.path())).expect("open"));
    let store = BlobStore::new(
        rocks as Arc<dyn ChunkStore>,
        StoreConfig::default().with_read_ahead_budget(BUDGET as usize),
    )
    .expect("store");
    let large = value(LARGE, 7);
    store
        .put("big", large.clone(), &PutOptions::new())
        .await
        .expect("put");
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let mut stream = store.get_stream("big").await.expect("stream");
        let first = stream.next().await.expect("a piece").expect("read");
        readers.push((stream, first.to_vec()));
    }
    // Let every fetch the readers may start land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (held, limit) = store.read_ahead();
    println!(
        "{READERS} stalled readers of an extent hold {} KiB of read-ahead (budget {} KiB)",
        held >> 10,
        limit >> 10
    );
    assert!(
        held <= BUDGET + READERS * BATCH,
        "{held} bytes held: more than the budget plus a batch per reader"
    );
    for (mut stream, mut got) in readers {
        while let Some(piece) = stream.next().await {
            got.extend_from_slice(&piece.expect("read"));
        }
        assert!(got == large[..], "read whole");
    }
    assert_eq!(store.read_ahead().0, 0, "all given back");
}

/// Files in the extent directory that are not saltblob's are never touched: not by opening, gc, fsck
/// (`--repair` included) or reclaim. A read-only extent file still reads and is still reclaimed; an immutable
/// one (`chattr +i`) makes the reclaim fail with a clear error and stays queued, losing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_read_only_files_in_the_extent_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rocks, store, large, path) = store_with_big(dir.path(), 5).await;
    let extents = dir.path().join("extents");
    let foreign = [
        extents.join("notes.txt"),
        extents.join("0123456789abcdef0123456789abcdef.extent"),
        // Named like an extent, but its header is not one (and names no version): left alone.
        extents.join("0123456789abcdef0123456789abcdef-0123456789abcdef.extent"),
    ];
    for f in &foreign {
        std::fs::write(f, b"not saltblob's").expect("foreign file");
    }
    let mut perms = std::fs::metadata(&path).expect("meta").permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&path, perms).expect("read-only");
    assert_eq!(store.get("big").await.expect("read-only file reads"), large);

    let gc = GcOptions::new().with_grace(Duration::ZERO);
    store.gc(&gc).await.expect("gc");
    let fsck = repair(&store).await;
    assert!(
        fsck.orphans.is_empty() && fsck.damaged.is_empty(),
        "{fsck:?}"
    );
    assert_eq!(fsck.version_files, 1, "{fsck:?}");
    drop(store);
    drop(rocks);
    let (rocks, store) = open(dir.path());
    for f in &foreign {
        assert!(f.exists(), "{} was touched", f.display());
    }

    // Immutable: the reclaim fails loudly, the queue keeps the version, nothing is lost.
    let immutable = Command::new("chattr")
        .arg("+i")
        .arg(&path)
        .status()
        .is_ok_and(|s| s.success());
    store.delete("big").await.expect("delete");
    if immutable {
        let err = store.reclaim_all().await.expect_err("cannot unlink");
        assert!(err.to_string().contains("cannot delete it"), "{err}");
        assert!(path.exists());
        let _ = Command::new("chattr").arg("-i").arg(&path).status();
    } else {
        eprintln!("chattr +i is not available here: the immutable case was skipped");
    }
    store.reclaim_all().await.expect("reclaim");
    assert!(!path.exists(), "reclaimed once it can be");
    drop(rocks);
}

/// A version whose extent file exists without any pointer to it (its put died before writing one, or after
/// a power loss lost them) is an orphan file: fsck reports it, and `--repair` removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_reports_and_repairs_orphan_extent_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rocks, store) = open(dir.path());
    // An old version, written directly: ids drawn in this process continue from the last one, which a
    // conformance test whose store clock jumped ahead may have drawn hours in the future, and a future version
    // is too young to repair even with a minimum age of zero.
    let orphan = BlobRef {
        key: Bytes::from_static(b"ghost"),
        version: saltblob_core::VersionId(1 << 80),
    };
    rocks
        .begin_chunk_records(
            &orphan,
            saltblob_core::RecordsPlan::new(65536, Some(1 << 20)),
        )
        .await
        .expect("begin");
    let fsck = store.fsck(&FsckOptions::new()).await.expect("fsck");
    assert_eq!(fsck.orphans.len(), 1, "{fsck:?}");
    assert_eq!((fsck.orphans[0].chunks, fsck.orphans[0].files), (0, 1));
    assert_eq!(&fsck.orphans[0].key[..], b"ghost");
    let fsck = repair(&store).await;
    assert!(fsck.orphans[0].removed, "{fsck:?}");
    assert!(extent_files(dir.path()).is_empty());
}

/// Environment variable that makes the child run (the directory to work in).
const CHILD_ENV: &str = "SALTBLOB_EXTENT_KILL_CHILD";
/// Intent lease of the child's puts.
const LEASE: Duration = Duration::from_secs(2);

/// Holds a put right after its extent file is synced, before its commit: signals the parent and waits to be
/// killed.
#[derive(Debug)]
struct StopAfterSync {
    inner: Arc<dyn ChunkStore>,
    signal: PathBuf,
}

#[async_trait]
impl ChunkStoreLayer for StopAfterSync {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    async fn sync_chunk_records(&self, blob: &BlobRef) -> saltblob_core::Result<()> {
        self.inner.sync_chunk_records(blob).await?;
        std::fs::write(&self.signal, blob.version.to_string()).expect("signal");
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok(())
    }
}

/// The child: commits version 1 of `k` (large), then puts version 2 through [`StopAfterSync`]. Not a test on
/// its own (it returns at once without the environment variable).
#[test]
#[ignore = "the child process of a_kill_between_extent_sync_and_commit_keeps_the_previous_version"]
fn extent_kill_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let rocks: Arc<dyn ChunkStore> =
            Arc::new(RocksStore::open(RocksConfig::new(dir.join("store"))).expect("open"));
        let config = StoreConfig::default().with_intent_lease(LEASE);
        let plain = BlobStore::new(Arc::clone(&rocks), config.clone()).expect("store");
        plain
            .put("k", value(LARGE, 1), &PutOptions::new())
            .await
            .expect("version 1");
        let held = Arc::new(StopAfterSync {
            inner: rocks,
            signal: dir.join("synced"),
        });
        let store = BlobStore::new(held, config).expect("store");
        let _ = store.put("k", value(LARGE, 2), &PutOptions::new()).await;
    });
}

/// A process killed after a large put's extent file is synced but before its commit leaves the previous
/// version, whole; the new version's file is the abandoned put's, which gc reclaims once its intent expires,
/// leaving no extent file and no orphan behind.
#[test]
fn a_kill_between_extent_sync_and_commit_keeps_the_previous_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = crate::child_until(
        "extents::extent_kill_child",
        CHILD_ENV,
        dir.path(),
        "synced",
        Duration::from_secs(120),
    );
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    let store_dir = dir.path().join("store");
    assert_eq!(extent_files(&store_dir).len(), 2, "both versions' files");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (_rocks, store) = open(&store_dir);
        assert_eq!(
            store.get("k").await.expect("the previous version"),
            value(LARGE, 1),
            "the previous version, whole"
        );
        tokio::time::sleep(LEASE + Duration::from_millis(500)).await;
        let gc = store
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        assert_eq!(gc.abandoned_puts, 1, "{gc:?}");
        assert_eq!(
            extent_files(&store_dir).len(),
            1,
            "the abandoned file is gone"
        );
        let fsck = store.fsck(&FsckOptions::new()).await.expect("fsck");
        assert!(
            fsck.damaged.is_empty() && fsck.orphans.is_empty(),
            "{fsck:?}"
        );
        assert_eq!(store.get("k").await.expect("get"), value(LARGE, 1));
    });
}
