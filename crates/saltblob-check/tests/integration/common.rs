//! Shared set-up: a store with small chunks, a hot-key workload, and a loop that runs it until the checker
//! finds what a test expects.

use std::sync::Arc;
use std::time::Duration;

use saltblob_check::{
    History, HistorySink, MemorySink, OpMix, Report, SizeMix, ViolationKind, WorkloadConfig, check,
    context, describe_op, key_set, run,
};
use saltblob_core::{BlobStore, ChunkStore, LayoutPolicy, StoreConfig};

/// Inline up to 1 KiB, 4 KiB chunks (the minimum), salted fan-out above 64 KiB over at most 8 salts.
pub fn policy() -> LayoutPolicy {
    LayoutPolicy::default()
        .with_inline_limit(1024)
        .with_chunk_size(4096)
        .with_fanout_threshold(64 * 1024)
        .with_max_salt(8)
}

/// A store on `backend` with [`policy`] and a small in-flight window (4 chunks) and batches (2 chunks).
pub fn store_on(backend: Arc<dyn ChunkStore>) -> BlobStore {
    let config = StoreConfig::default()
        .with_policy(policy())
        .with_inflight_bytes(16 * 1024)
        .with_batch_bytes(8 * 1024);
    BlobStore::new(backend, config).expect("valid store config")
}

/// `clients` clients on `keys` hot keys, sizes at every layout boundary up to 160 KiB.
pub fn hot_keys(keys: usize, clients: usize, duration: Duration, seed: u64) -> WorkloadConfig {
    let mut config = WorkloadConfig::new(key_set("hot/", keys));
    config.clients = clients;
    config.sizes = SizeMix::boundaries(&policy(), 160 * 1024);
    config.mix = OpMix {
        put: 30,
        get: 50,
        delete: 10,
        conditional_put: 10,
    };
    config.duration = Some(duration);
    config.seed = seed;
    config
}

/// Prints the report's summary and its first violations.
pub fn print(label: &str, report: &Report) {
    println!("{label}: {}", report.summary());
    for v in report.violations.iter().take(3) {
        println!("  {v}");
    }
}

/// Prints the operations around the first violation, if any.
pub fn print_context(history: &History, report: &Report) {
    if let Some(v) = report.violations.first() {
        println!("operations on {:?} around {v}:", v.key);
        for op in context(history, v, 2000) {
            println!("  {}", describe_op(op));
        }
    }
}

/// Runs `config` on `store` in rounds (each with another seed), checking the whole history after each, until
/// a violation of one of `wanted` kinds is found or `rounds` rounds are done; returns the last report.
pub async fn run_until(
    label: &str,
    store: &BlobStore,
    config: &WorkloadConfig,
    wanted: &[ViolationKind],
    rounds: u64,
) -> Report {
    let sink = MemorySink::new();
    let shared: Arc<dyn HistorySink> = Arc::new(sink.clone());
    let mut report = Report::default();
    for round in 0..rounds {
        let mut config = config.clone();
        config.seed = config.seed.wrapping_add(round);
        let stats = run(store.clone(), &config, Arc::clone(&shared)).await;
        report = check(&History::from_events(sink.events()));
        print(&format!("{label} round {round} ({stats})"), &report);
        if wanted.iter().any(|k| report.count(*k) > 0) {
            break;
        }
    }
    report
}
