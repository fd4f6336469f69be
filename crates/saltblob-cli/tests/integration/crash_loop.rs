//! The embedded crash loop, driven by the history checker: a child process runs a mixed put/get/delete load
//! (values from 0 bytes to 64 MiB, chunk-boundary sizes included, with background gc running) and is killed
//! with SIGKILL at a random moment; the store is reopened, every key is read back, and the whole history of
//! every cycle so far is checked: no acknowledged blob lost, no torn or mixed read, no checksum error. At the
//! end `saltblob fsck` must find no damage, and after `saltblob gc` no orphan may remain and the disk must hold
//! little more than the live data.
//!
//! `SALTBLOB_CRASH_CYCLES` sets the number of cycles (default 50, the CI minimum; run more locally). The same loop
//! runs again with every blob sealed (encryption at rest: a keyring in the test's directory, 15 cycles by
//! default).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use saltblob::{GcOptions, LayoutPolicy, StoreConfig};
use saltblob_check::{
    Event, FileSink, History, HistorySink, OpKind, OpMix, SizeMix, ViolationKind, WorkloadConfig,
    check, final_reads, key_set, run,
};

use crate::common::*;

/// Tells the re-executed test binary that it is the child, and where its store and history are.
const CHILD_ENV: &str = "SALTBLOB_CRASH_CHILD";
const KEYS: usize = 6;
const MAX_SIZE: u64 = 64 << 20;
/// Intent lease of the child's puts: short, so that gc may reclaim killed puts soon after.
const LEASE: Duration = Duration::from_secs(1);

/// The URL of the store in `spec`'s `store` directory with `extra` parameters (`&`-joined), sealing under key `k`
/// when `spec` holds a keyring (`keys.ring`).
fn store_url(spec: &Path, extra: &str) -> String {
    let mut params = vec![extra.to_owned()];
    let ring = spec.join("keys.ring");
    if ring.exists() {
        params.push(format!(
            "encryption=local&keyring={}&encryption_key=k",
            ring.display()
        ));
    }
    params.retain(|p| !p.is_empty());
    format!(
        "rocksdb://{}?{}",
        spec.join("store").display(),
        params.join("&")
    )
}

fn config() -> StoreConfig {
    StoreConfig::default()
        .with_intent_lease(LEASE)
        .with_grace(Duration::from_secs(2))
}

fn keys() -> Vec<String> {
    key_set("crash/", KEYS)
}

/// The child: runs the load until it is killed. Not a test on its own (it returns at once without the
/// environment variable the crash loop sets).
#[test]
#[ignore = "the child process of crash_loop; run by it"]
fn crash_loop_child() {
    let Some(spec) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let spec = PathBuf::from(spec);
    let history = spec.join("history.jsonl");
    let seed: u64 = rand::random();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async move {
        // Rewriting live data to free partly-garbage blob files is left to the final gc: the child's background
        // passes only delete.
        let url = store_url(&spec, "space_reclaim_threshold=1.0");
        let store = saltblob::open(&url, config()).await.expect("open store");
        let _gc = store.spawn_gc(Duration::from_secs(2), GcOptions::new());
        let sink = Arc::new(FileSink::open(&history).expect("history file"));
        let mut load = WorkloadConfig::new(keys());
        load.clients = 4;
        load.sizes = SizeMix::boundaries(&LayoutPolicy::default(), MAX_SIZE);
        load.mix = OpMix {
            put: 35,
            get: 45,
            delete: 10,
            conditional_put: 10,
        };
        load.duration = None;
        load.seed = seed;
        run(store, &load, sink).await;
    });
}

fn spawn_child(spec: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "crash_loop::crash_loop_child",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child")
}

/// Cycles of a crash loop: `SALTBLOB_CRASH_CYCLES`, else `default`.
fn cycles(default: usize) -> usize {
    std::env::var("SALTBLOB_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn crash_loop_loses_and_tears_nothing() {
    crash_loop(cycles(50), false);
}

#[test]
fn crash_loop_with_every_blob_sealed_loses_and_tears_nothing() {
    crash_loop(cycles(15), true);
}

/// `cycles` cycles of the loop, every blob sealed when `sealed`.
fn crash_loop(cycles: usize, sealed: bool) {
    let spec = tempfile::tempdir().expect("tempdir");
    if sealed {
        let ring = spec.path().join("keys.ring");
        ok(Command::new(env!("CARGO_BIN_EXE_saltblob"))
            .args(["keyring", "new"])
            .arg(&ring));
        ok(Command::new(env!("CARGO_BIN_EXE_saltblob"))
            .args(["keyring", "add"])
            .arg(&ring)
            .arg("k"));
    }
    let store_dir = spec.path().join("store");
    let history_path = spec.path().join("history.jsonl");
    let label = if sealed {
        "crash loop (sealed)"
    } else {
        "crash loop"
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut rng = rand::rng();
    let started = Instant::now();
    let mut final_read_failures = 0;
    for cycle in 0..cycles {
        let mut child = spawn_child(spec.path());
        std::thread::sleep(Duration::from_millis(rng.random_range(300..2000)));
        child.kill().expect("SIGKILL the child");
        child.wait().expect("reap the child");
        let sink = Arc::new(FileSink::open(&history_path).expect("history file"));
        // The child is dead: what it left in flight can no longer take effect.
        sink.record(&Event::Barrier {
            at: saltblob_check::history::now_micros(),
        });
        let reads = rt.block_on(async {
            let store = saltblob::open(&store_url(spec.path(), ""), config())
                .await
                .expect("the store reopens after SIGKILL");
            final_reads(store, &keys(), sink.clone()).await
        });
        final_read_failures += reads.failed;
        let history = History::load(&history_path).expect("load history");
        let report = check(&history);
        assert!(
            report.is_clean(),
            "cycle {cycle}: {}\n{:#?}",
            report.summary(),
            report.violations
        );
    }
    let history = History::load(&history_path).expect("load history");
    let report = check(&history);
    println!(
        "{label}: {cycles} cycles (SIGKILL at a random moment) in {:.0?}; {}",
        started.elapsed(),
        report.summary()
    );
    assert!(report.is_clean(), "{:#?}", report.violations);
    assert_eq!(final_read_failures, 0, "reads after a restart never fail");
    let acknowledged_puts = history
        .ops
        .iter()
        .filter(|op| matches!(op.kind, OpKind::Put { .. }) && op.is_ok())
        .count();
    println!(
        "{label}: {acknowledged_puts} acknowledged puts, {} reads returned a value; lost {}, torn {}, corrupt {}",
        report.gets_with_value,
        report.count(ViolationKind::Lost),
        report.count(ViolationKind::Torn),
        report.count(ViolationKind::Corrupt)
    );
    assert!(
        acknowledged_puts > 0 && report.gets_with_value > 0,
        "the load did work: {}",
        report.summary()
    );

    // fsck: nothing damaged. gc (once the killed puts' leases are over): no orphan left, disk near live data.
    let (gc, fsck) = fsck_gc_fsck_url(&store_url(spec.path(), ""), LEASE);
    if sealed {
        let listed = rt.block_on(async {
            let store = saltblob::open(&store_url(spec.path(), ""), config())
                .await
                .expect("open");
            store.list("crash/").await.expect("list")
        });
        let plain = listed
            .iter()
            .filter(|e| e.manifest.as_ref().is_ok_and(|m| m.sealing.is_none()))
            .count();
        assert!(!listed.is_empty(), "{label}: no blob left");
        assert_eq!(plain, 0, "{label}: a blob stored in plaintext");
    }
    let live = fsck["bytes"].as_u64().expect("live bytes");
    let disk = disk_usage(&store_dir);
    println!(
        "{label}, after the loop: {gc}; fsck: {} blobs, {live} live bytes, 0 damaged, 0 orphans; disk {disk} bytes",
        fsck["blobs"]
    );
    // Within 10% of the live data, plus the engine's own files (logs, manifest, options, small tables).
    assert!(
        disk <= live + live / 10 + (8 << 20),
        "disk usage {disk} after gc, live data {live}"
    );
}
