//! The correct store: no violation under concurrent hot-key load, also across simulated crashes and through
//! a history file.

use std::sync::Arc;
use std::time::Duration;

use saltblob_check::{
    Event, FileSink, History, HistorySink, MemorySink, Op, Outcome, check, final_reads, run,
};
use saltblob_core::MemoryStore;
use saltblob_core::conformance::orphans_after_gc;

use crate::common::{hot_keys, print, print_context, store_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_has_no_violation_under_hot_key_load() {
    let store = store_on(Arc::new(MemoryStore::new()));
    let config = hot_keys(2, 6, Duration::from_millis(1500), 1);
    let sink = MemorySink::new();
    let shared: Arc<dyn HistorySink> = Arc::new(sink.clone());
    let stats = run(store.clone(), &config, Arc::clone(&shared)).await;
    final_reads(store.clone(), &config.keys, shared).await;
    // Every replaced version was queued before its replacement (compare-and-set commits): gc leaves nothing.
    let orphans = orphans_after_gc(&store, "hot/").await;
    assert_eq!(orphans, vec![], "no orphan after gc");
    let history = sink.history();
    let report = check(&history);
    print(&format!("memory store ({stats})"), &report);
    print_context(&history, &report);
    assert!(report.is_clean(), "{:#?}", report.violations);
    assert!(report.gets_with_value > 50, "{report:?}");
    assert!(report.puts > 50 && report.deletes > 5, "{report:?}");
    assert_eq!((report.failed, report.indeterminate), (0, 0));
    // Every layout was exercised: inline, one partition and salted values were read back.
    let lens: Vec<u64> = history
        .ops
        .iter()
        .filter_map(|op: &Op| match &op.outcome {
            Some(Outcome::Ok(saltblob_check::OpResult::Get(
                saltblob_check::GetResult::Value { len, .. },
            ))) => Some(*len),
            _ => None,
        })
        .collect();
    for (lo, hi) in [(0, 1024), (1025, 64 * 1024), (64 * 1024 + 1, u64::MAX)] {
        assert!(
            lens.iter().any(|l| (lo..=hi).contains(l)),
            "no value of {lo}..={hi} bytes read"
        );
    }
}

#[test]
fn killed_clients_leave_indeterminate_ops_and_no_violation() {
    // In-process stand-in for the crash loop: each "process" is a Tokio runtime running the workload, shut
    // down at a random moment (its clients dropped mid-operation; dropping the runtime waits until none of
    // them runs any more), then a barrier records its death and the next one carries on with the same
    // store. At the end every key is read.
    let store = store_on(Arc::new(MemoryStore::new()));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("history.jsonl");
    let keys = hot_keys(3, 4, Duration::from_secs(60), 0).keys;
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    };
    for life in 0..6u64 {
        let sink: Arc<dyn HistorySink> = Arc::new(FileSink::open(&path).expect("history file"));
        let mut config = hot_keys(3, 4, Duration::from_secs(60), life);
        config.duration = None;
        let process = runtime();
        process.spawn({
            let (store, sink) = (store.clone(), Arc::clone(&sink));
            async move { run(store, &config, sink).await }
        });
        std::thread::sleep(Duration::from_millis(60 + 37 * life));
        drop(process);
        sink.record(&Event::Barrier {
            at: saltblob_check::history::now_micros(),
        });
    }
    let sink: Arc<dyn HistorySink> = Arc::new(FileSink::open(&path).expect("history file"));
    runtime().block_on(final_reads(store, &keys, sink));
    let history = History::load(&path).expect("history loads");
    let report = check(&history);
    print("six killed clients, then final reads", &report);
    print_context(&history, &report);
    for op in &history.ops {
        if let Some(Outcome::Failed { error, .. }) = &op.outcome {
            println!("  failed {} {}: {error}", op.kind.name(), op.id);
        }
    }
    assert!(report.is_clean(), "{:#?}", report.violations);
    assert!(report.indeterminate > 0, "{report:?}");
    assert!(report.gets_with_value > 0, "{report:?}");
    assert_eq!(report.unpaired_events, 0);
    // Operations cut off before their barrier end there: they are no longer open-ended.
    assert!(history.ops.iter().all(|op| op.end != u64::MAX));
}
