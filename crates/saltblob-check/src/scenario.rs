//! Ready-made checked scenarios that the backends' test suites share.

use std::sync::Arc;
use std::time::Duration;

use saltblob_core::{BlobStore, GcOptions};

use crate::checker::{Report, check};
use crate::history::MemorySink;
use crate::workload::{OpMix, SizeMix, Stats, WorkloadConfig, final_reads, key_set, run};

/// What [`hot_keys`] did and what the checker found.
#[derive(Debug)]
pub struct Outcome {
    /// The clients' view, final reads included.
    pub stats: Stats,
    /// The checker's verdict on the whole history.
    pub report: Report,
}

impl Outcome {
    /// Prints the stats and the verdict under `label`, then panics unless the history is clean and the load
    /// did work (puts, and gets that returned values): for tests.
    pub fn assert_clean(&self, label: &str) {
        println!(
            "{label}: {}; checker: {}",
            self.stats,
            self.report.summary()
        );
        assert!(
            self.report.is_clean(),
            "{label}: {:#?}",
            self.report.violations
        );
        assert!(
            self.stats.puts > 0 && self.stats.gets_with_value > 0,
            "{label}: the load did no work: {}",
            self.stats
        );
    }
}

/// Concurrent writers and readers on a few hot keys: `clients` clients do random puts (sizes at every layout
/// boundary of `store`'s policy, up to `max_size`), conditional puts, gets and deletes on `keys` keys under `prefix` for
/// `duration`, while a background gc runs every 200 ms; then every key is read once and the whole history is
/// checked. Returns the clients' stats and the checker's report (a correct store has no violation).
pub async fn hot_keys(
    store: &BlobStore,
    prefix: &str,
    keys: usize,
    clients: usize,
    max_size: u64,
    duration: Duration,
) -> Outcome {
    let sink = MemorySink::new();
    let keys = key_set(prefix, keys);
    let mut load = WorkloadConfig::new(keys.clone());
    load.clients = clients;
    load.sizes = SizeMix::boundaries(&store.config().policy, max_size);
    load.mix = OpMix {
        put: 35,
        get: 45,
        delete: 10,
        conditional_put: 10,
    };
    load.duration = Some(duration);
    load.seed = rand::random();
    let _gc = store.spawn_gc(
        Duration::from_millis(200),
        GcOptions::new().with_prefix(prefix.to_owned()),
    );
    let mut stats = run(store.clone(), &load, Arc::new(sink.clone())).await;
    stats.merge(&final_reads(store.clone(), &keys, Arc::new(sink.clone())).await);
    let report = check(&sink.history());
    Outcome { stats, report }
}
