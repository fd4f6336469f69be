//! Disk write and fsync failures injected into the embedded store with libfiu (Debian's fiu-utils): a child
//! process runs a mixed load under `fiu-run -x`; once it is running, `fiu-ctrl` makes `write`, `pwrite`,
//! `writev`, `pwritev`, `fsync` and `fdatasync` fail at random for a few seconds, then stops the faults and the
//! child. Every failure must reach the caller as an error: the store is reopened without faults, every key is
//! read back and the history is checked (an acknowledged put that did not survive would be *lost*), and `fsck`
//! must find nothing damaged. Run twice: as is, and with every blob sealed (encryption at rest).
//!
//! And one failure, not at random: the log's `fdatasync` fails under a put of a new key, which leaves the put's
//! record in the log file. The store must then refuse everything until it is reopened: a delete that read the
//! key as absent and reported success would be undone by the reopen, which replays the failed put.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use saltblob::{LayoutPolicy, PutOptions, StoreConfig};
use saltblob_check::{
    Event, FileSink, History, HistorySink, OpMix, Outcome, SizeMix, WorkloadConfig, check,
    final_reads, key_set, run,
};

use crate::common::*;

const CHILD_ENV: &str = "SALTBLOB_FAULT_CHILD";
const FAULTS: &[&str] = &[
    "enable_random name=posix/io/rw/write,probability=0.02",
    "enable_random name=posix/io/rw/pwrite,probability=0.02",
    "enable_random name=posix/io/rw/writev,probability=0.02",
    "enable_random name=posix/io/rw/pwritev,probability=0.02",
    "enable_random name=posix/io/sync/fsync,probability=0.1",
    "enable_random name=posix/io/sync/fdatasync,probability=0.1",
];
const POINTS: &[&str] = &[
    "posix/io/rw/write",
    "posix/io/rw/pwrite",
    "posix/io/rw/writev",
    "posix/io/rw/pwritev",
    "posix/io/sync/fsync",
    "posix/io/sync/fdatasync",
];

fn keys() -> Vec<String> {
    key_set("fault/", 4)
}

/// The child: runs the load until the parent creates the `stop` file. Not a test on its own (it returns at once
/// without the environment variable the parent sets).
#[test]
#[ignore = "the child process of injected_write_and_fsync_failures_surface_as_errors; run by it"]
fn fault_child() {
    crate::common::fault_child(CHILD_ENV, async |spec, store| {
        let sink = Arc::new(FileSink::open(spec.join("history.jsonl")).expect("history file"));
        let mut load = WorkloadConfig::new(keys());
        load.clients = 3;
        load.sizes = SizeMix::boundaries(&LayoutPolicy::default(), 12 << 20);
        load.mix = OpMix {
            put: 40,
            get: 40,
            delete: 10,
            conditional_put: 10,
        };
        load.duration = None;
        load.seed = rand::random();
        let stop = load.stop.clone();
        let stop_file = spec.join("stop");
        tokio::spawn(async move {
            while !stop_file.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            stop.stop();
        });
        run(store, &load, sink).await;
    });
}

fn ok_ops(history: &Path) -> usize {
    History::load(history)
        .map(|h| h.ops.iter().filter(|op| op.is_ok()).count())
        .unwrap_or(0)
}

#[test]
fn injected_write_and_fsync_failures_surface_as_errors() {
    write_and_fsync_failures(false);
}

/// The same with every blob sealed (encryption at rest, a keyring beside the store).
#[test]
fn injected_write_and_fsync_failures_surface_as_errors_with_every_blob_sealed() {
    write_and_fsync_failures(true);
}

/// The faults, on a store whose puts are all sealed when `sealed`.
fn write_and_fsync_failures(sealed: bool) {
    let available = Command::new("fiu-run")
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        available,
        "fiu-run is missing: install Debian's fiu-utils (scripts/test.sh does)"
    );
    let spec = tempfile::tempdir().expect("tempdir");
    if sealed {
        make_sealing_keyring(spec.path());
    }
    let history = spec.path().join("history.jsonl");
    let mut child = fiu_child("fault_injection::fault_child", CHILD_ENV, spec.path())
        .spawn()
        .expect("spawn the child under fiu-run");
    let pid = child.id();
    let started = Instant::now();
    while ok_ops(&history) < 20 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the child did not get going"
        );
        assert!(
            child.try_wait().expect("poll").is_none(),
            "the child exited early"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = History::load(&history).expect("history");
    fiu_ctrl(pid, FAULTS.iter().map(|s| (*s).to_owned()));
    std::thread::sleep(Duration::from_secs(3));
    fiu_ctrl(pid, POINTS.iter().map(|p| format!("disable name={p}")));
    std::fs::write(spec.path().join("stop"), b"").expect("stop file");
    // A child killed by a failure it could not handle (a panic, an abort) fails the test; what it did is
    // checked either way.
    child_succeeded(child);

    let sink = Arc::new(FileSink::open(&history).expect("history file"));
    sink.record(&Event::Barrier {
        at: saltblob_check::history::now_micros(),
    });
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let reads = rt.block_on(async {
        let store = saltblob::open(
            &store_url(&spec.path().join("store")),
            StoreConfig::default(),
        )
        .await
        .expect("the store reopens clean after the faults");
        final_reads(store, &keys(), sink.clone()).await
    });
    let h = History::load(&history).expect("history");
    let report = check(&h);
    // Operations that ended with an error, counted the same way in both histories: an operation that had
    // failed before the faults is still failed after, so the difference is what failed during them.
    let failed = |h: &History| {
        h.ops
            .iter()
            .filter(|o| matches!(o.outcome, Some(Outcome::Failed { .. })))
            .count()
    };
    let failed_during_faults = failed(&h)
        .checked_sub(failed(&before))
        .expect("an operation failed before the faults cannot have succeeded after them");
    println!(
        "fault injection: {} ops under injected write/fsync failures; {}",
        h.ops.len() - before.ops.len(),
        report.summary()
    );
    assert!(report.is_clean(), "{:#?}", report.violations);
    assert!(
        failed_during_faults > 0,
        "the injected failures reached the callers as errors"
    );
    assert_eq!(reads.failed, 0, "reads after reopening succeed");
    let fsck = json(&ok(
        saltblob(&spec.path().join("store")).args(["fsck", "--json"])
    ));
    assert_eq!(fsck["damaged"], serde_json::json!([]), "{fsck}");
    assert_eq!(fsck["unverified"], serde_json::json!([]), "{fsck}");
    if sealed {
        let heads: Vec<serde_json::Value> = keys()
            .iter()
            .filter_map(|k| {
                let out = saltblob(&spec.path().join("store"))
                    .args(["head", k, "--json"])
                    .output()
                    .expect("run saltblob");
                out.status.success().then(|| json(&out))
            })
            .collect();
        assert!(!heads.is_empty(), "some key holds a blob");
        for head in heads {
            assert_eq!(head["encryption"]["key"], "k", "sealed: {head}");
        }
    }
    println!(
        "fault injection: {failed_during_faults} operations failed with an error, 0 silent; reopened clean; fsck: {} blobs, 0 damaged",
        fsck["blobs"]
    );
}

const LOG_CHILD_ENV: &str = "SALTBLOB_LOG_FAULT_CHILD";

/// An operation's outcome on one line: `ok`, or `error` and the message.
fn outcome<T>(r: &saltblob::Result<T>) -> String {
    match r {
        Ok(_) => "ok".to_owned(),
        Err(e) => format!("error {e}"),
    }
}

/// The child of [`a_failed_log_sync_stops_the_store_until_it_is_reopened`]: puts `old`, says `ready` and waits
/// for `go` (the faults on), puts `new` (a key it never held, small: its commit is one synced log write), writes
/// the outcome to `put`, waits for `go2` (the faults off), then deletes `new`, gets `old` and puts `other`,
/// writing their outcomes to `after`, a line each. Not a test on its own.
#[test]
#[ignore = "the child process of a_failed_log_sync_stops_the_store_until_it_is_reopened; run by it"]
fn log_fault_child() {
    crate::common::fault_child(LOG_CHILD_ENV, async |spec, store| {
        let opts = PutOptions::new();
        store
            .put("old", Bytes::from_static(b"old"), &opts)
            .await
            .expect("the put before the faults");
        signal_and_wait(&spec, "ready", "go").await;
        let put = store.put("new", Bytes::from_static(b"new"), &opts).await;
        std::fs::write(spec.join("put"), outcome(&put)).expect("write the outcome");
        signal_and_wait(&spec, "put-done", "go2").await;
        let after = [
            outcome(&store.delete("new").await),
            outcome(&store.get("old").await),
            outcome(&store.put("other", Bytes::from_static(b"x"), &opts).await),
        ];
        std::fs::write(spec.join("after"), after.join("\n")).expect("write the outcomes");
    });
}

/// A put whose log `fdatasync` fails fails, and the store then refuses a delete of that key (which it would
/// read as absent), a get and a put until it is reopened: reopened, it holds the first value and everything
/// works. Without the refusal the delete reports success and the reopen undoes it (the libfiu load above found
/// that as a *stale* read, about one run in ten).
#[test]
fn a_failed_log_sync_stops_the_store_until_it_is_reopened() {
    let spec = tempfile::tempdir().expect("tempdir");
    let dir = spec.path();
    let mut child = fiu_child("fault_injection::log_fault_child", LOG_CHILD_ENV, dir)
        .spawn()
        .expect("spawn the child under fiu-run (Debian's fiu-utils)");
    wait_for_signal(dir, "ready", &mut child);
    let syncs = ["posix/io/sync/fsync", "posix/io/sync/fdatasync"];
    fiu_ctrl(child.id(), syncs.iter().map(|p| format!("enable name={p}")));
    std::fs::write(dir.join("go"), b"").expect("go");
    wait_for_signal(dir, "put-done", &mut child);
    fiu_ctrl(
        child.id(),
        syncs.iter().map(|p| format!("disable name={p}")),
    );
    std::fs::write(dir.join("go2"), b"").expect("go2");
    child_succeeded(child);

    let put = std::fs::read_to_string(dir.join("put")).expect("the put's outcome");
    assert!(
        put.starts_with("error") && put.contains("fdatasync"),
        "the put fails with the sync's error: {put}"
    );
    let after = std::fs::read_to_string(dir.join("after")).expect("the outcomes after");
    let after: Vec<&str> = after.lines().collect();
    assert_eq!(after.len(), 3, "{after:?}");
    for (op, line) in ["delete new", "get old", "put other"].iter().zip(&after) {
        assert!(
            line.starts_with("error") && line.contains("reopen it") && line.contains("fdatasync"),
            "{op} is refused until the store is reopened, naming the first failure: {line}"
        );
    }

    let store = dir.join("store");
    let got = dir.join("got");
    ok(saltblob(&store).args(["get", "old", "-o"]).arg(&got));
    assert_eq!(std::fs::read(&got).expect("read"), b"old");
    // The failed put may be back, replayed from the log: whole, if so. Deleted now, it stays deleted.
    let new = saltblob(&store)
        .args(["get", "new", "-o"])
        .arg(&got)
        .output()
        .expect("run saltblob");
    println!(
        "after the reopen, the failed put of new is {}",
        if new.status.success() {
            "back"
        } else {
            "absent"
        }
    );
    if new.status.success() {
        assert_eq!(std::fs::read(&got).expect("read"), b"new");
        ok(saltblob(&store).args(["rm", "new"]));
    }
    fails(saltblob(&store).args(["get", "new"]), 3, "not found");
    ok(saltblob(&store)
        .args(["put", "other", "-"])
        .stdin(std::process::Stdio::null()));
    let fsck = json(&ok(saltblob(&store).args(["fsck", "--json"])));
    assert_eq!(fsck["damaged"], serde_json::json!([]), "{fsck}");
}
