//! Ready-made checked scenarios that the backends' test suites share.

use std::sync::Arc;
use std::time::Duration;

use saltblob_core::{BlobStore, GcOptions};

use crate::checker::{Report, Violation, ViolationKind, check, context, describe_op};
use crate::history::{History, MemorySink, Op, OpKind};
use crate::workload::{
    Keeping, OpMix, SizeMix, Stats, VersionLog, WorkloadConfig, final_reads, final_version_reads,
    key_set, run,
};

/// What [`hot_keys`] or [`kept_versions`] did and what the checker found.
#[derive(Debug)]
pub struct Outcome {
    /// The clients' view, final reads included.
    pub stats: Stats,
    /// The checker's verdict on the whole history.
    pub report: Report,
    /// The whole history, final reads included.
    pub history: History,
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
        for v in self.report.violations.iter().take(3) {
            println!("{label}: {v}; evidence:");
            for line in self.evidence(v) {
                println!("    {line}");
            }
        }
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

    /// Prints the verdict under `label`, then panics unless the checker found at least one violation of `kind`:
    /// for tests of a deliberately broken backend.
    pub fn assert_caught(&self, label: &str, kind: ViolationKind) {
        println!("{label}: checker: {}", self.report.summary());
        assert!(
            self.report.count(kind) > 0,
            "{label}: not caught: {}",
            self.report.summary()
        );
    }
}

impl Outcome {
    /// The operations on the key of `violation` within 2 ms of its get and, for a get by version, every
    /// operation that names that version or created it and every write from that version's put on, by
    /// invocation, at most 60: what to print when a check fails.
    pub fn evidence(&self, violation: &Violation) -> Vec<String> {
        let Some(get) = self.history.ops.iter().find(|op| op.id == violation.op) else {
            return Vec::new();
        };
        let version = match &get.kind {
            OpKind::GetVersion { version, .. } => Some(version.as_str()),
            _ => None,
        };
        let near = context(&self.history, violation, 2000);
        let created_at = version.and_then(|v| {
            self.history
                .ops
                .iter()
                .find(|op| op.kind.key() == violation.key && op.created_version() == Some(v))
                .map(|op| op.invoke)
        });
        let since_put = |op: &Op| {
            created_at.is_some_and(|at| {
                op.kind.key() == violation.key
                    && !op.kind.is_read()
                    && op.end >= at
                    && op.invoke <= get.end
            })
        };
        self.history
            .ops
            .iter()
            .filter(|op| {
                let names = |v: &str| {
                    op.created_version() == Some(v)
                        || matches!(&op.kind, OpKind::GetVersion { version, .. }
                            | OpKind::RemoveVersion { version, .. } if version == v)
                };
                let other_version_read =
                    matches!(&op.kind, OpKind::GetVersion { version: v, .. } if Some(v.as_str()) != version);
                (near.iter().any(|n| n.id == op.id) && !other_version_read)
                    || version.is_some_and(|v| op.kind.key() == violation.key && names(v))
                    || since_put(op)
            })
            .take(60)
            .map(describe_op)
            .collect()
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
    let mut load = WorkloadConfig::new(key_set(prefix, keys));
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
    checked_run(store, prefix, &load, Duration::from_millis(200), None).await
}

/// Runs `load` on `store` while a background gc passes over `prefix` every `gc_every`, then reads every key (and
/// every version in `versions`) once, and checks the whole history.
async fn checked_run(
    store: &BlobStore,
    prefix: &str,
    load: &WorkloadConfig,
    gc_every: Duration,
    versions: Option<VersionLog>,
) -> Outcome {
    let sink = MemorySink::new();
    let _gc = store.spawn_gc(gc_every, GcOptions::new().with_prefix(prefix.to_owned()));
    let mut stats = run(store.clone(), load, Arc::new(sink.clone())).await;
    stats.merge(&final_reads(store.clone(), &load.keys, Arc::new(sink.clone())).await);
    if let Some(versions) = versions {
        let versions = versions.all();
        stats.merge(&final_version_reads(store.clone(), &versions, Arc::new(sink.clone())).await);
    }
    let history = sink.history();
    let report = check(&history);
    Outcome {
        stats,
        report,
        history,
    }
}

/// Keeping clients on a few hot keys: `clients` clients do random puts (three in four keeping the version they
/// replace), conditional puts (keeping nothing), plain gets, gets by version and removals of kept versions
/// (picked from the versions their acknowledged puts created), and deletes, on `keys` keys under `prefix` for
/// `duration`, with sizes at every layout boundary of `store`'s policy up to `max_size`, while a background gc
/// runs a reclaim pass every 100 ms (give `store` a short grace period, so that removed and replaced versions
/// are reclaimed during the run). Then every key and every recorded version is read once and the whole history
/// is checked. Returns the clients' stats and the checker's report (a correct store has no violation).
///
/// Removals name kept versions only ([`Keeping::remove_current`] false) and conditional puts keep nothing
/// ([`Keeping::keep_conditional`] false); [`kept_versions_with_promotions`] does both.
pub async fn kept_versions(
    store: &BlobStore,
    prefix: &str,
    keys: usize,
    clients: usize,
    max_size: u64,
    duration: Duration,
) -> Outcome {
    keeping_load(
        store,
        prefix,
        keys,
        clients,
        max_size,
        duration,
        Load::Mixed,
    )
    .await
}

/// [`kept_versions`] as S3's versioned buckets write: every write keeps what it replaces (puts, conditional puts;
/// no plain put or delete), and removals name kept and current versions (a removal of the current version makes
/// the newest kept one current). Kept versions must outlive gc and read back whole, and removed ones stay removed.
/// For Cassandra, where plain writes and keeping ones (compare-and-sets, lightweight transactions) on one key do
/// not mix: a plain write that a compare-and-set does not see and whose timestamp is older than the
/// compare-and-set's is ordered before it unkept (`docs/guarantees.md`).
pub async fn kept_versions_keeping_only(
    store: &BlobStore,
    prefix: &str,
    keys: usize,
    clients: usize,
    max_size: u64,
    duration: Duration,
) -> Outcome {
    keeping_load(
        store,
        prefix,
        keys,
        clients,
        max_size,
        duration,
        Load::KeepingOnly,
    )
    .await
}

/// [`kept_versions`] with removals that may name the current version, so that kept versions are made current
/// again (promoted), and with conditional puts that keep. Histories checked here found three store races, now
/// fixed: a promotion losing a version a keeping put kept meanwhile and a get by version missing a version being
/// promoted (the promoted version's kept record stays in place), and a keeping put whose commit was refused or
/// retried after it wrote the kept record of the version it read, which brought that version back when a removal
/// removed it in between (*resurrected*; a removal now leaves a marker that outlasts such records).
pub async fn kept_versions_with_promotions(
    store: &BlobStore,
    prefix: &str,
    keys: usize,
    clients: usize,
    max_size: u64,
    duration: Duration,
) -> Outcome {
    keeping_load(store, prefix, keys, clients, max_size, duration, Load::Racy).await
}

/// Which writes a keeping load makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Keeping puts (75%) and plain ones, plain deletes, removals of kept versions only, conditional puts that
    /// keep nothing.
    Mixed,
    /// Every write keeps (puts, conditional puts); no plain delete; removals of kept and current versions.
    KeepingOnly,
    /// [`Load::Mixed`] with removals of current versions and conditional puts that keep.
    Racy,
}

/// The load of [`kept_versions`] and its variants, as `kind` says.
async fn keeping_load(
    store: &BlobStore,
    prefix: &str,
    keys: usize,
    clients: usize,
    max_size: u64,
    duration: Duration,
    kind: Load,
) -> Outcome {
    let racy = kind == Load::Racy;
    let keeping_only = kind == Load::KeepingOnly;
    let mut load = WorkloadConfig::new(key_set(prefix, keys));
    load.clients = clients;
    load.sizes = SizeMix::boundaries(&store.config().policy, max_size);
    load.mix = OpMix {
        put: 25,
        get: 15,
        delete: if keeping_only { 0 } else { 5 },
        conditional_put: 5,
    };
    let keeping = Keeping {
        keep_percent: if keeping_only { 100 } else { 75 },
        get_version: 35,
        remove_version: 15,
        keep_conditional: racy || keeping_only,
        remove_current: racy || keeping_only,
        ..Keeping::default()
    };
    let versions = keeping.versions.clone();
    load.keeping = Some(keeping);
    load.duration = Some(duration);
    load.seed = rand::random();
    checked_run(
        store,
        prefix,
        &load,
        Duration::from_millis(100),
        Some(versions),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broken::DropsKept;
    use saltblob_core::MemoryStore;
    use saltblob_core::conformance::small_config;

    fn store(backend: Arc<dyn saltblob_core::ChunkStore>) -> BlobStore {
        let config = small_config().with_grace(Duration::from_millis(200));
        BlobStore::new(backend, config).expect("store")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kept_versions_on_a_correct_store_are_clean() {
        let s = store(Arc::new(MemoryStore::new()));
        let outcome = kept_versions(&s, "kept/", 2, 6, 100 << 10, Duration::from_secs(2)).await;
        outcome.assert_clean("memory, kept versions");
        assert!(outcome.stats.removals > 0, "{}", outcome.stats);
    }

    /// Removals of current versions race with keeping puts, refused ones among them (see
    /// [`kept_versions_with_promotions`]; before removals left markers, most runs brought a removed version back).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kept_versions_with_promotions_are_clean() {
        let s = store(Arc::new(MemoryStore::new()));
        let outcome =
            kept_versions_with_promotions(&s, "kept/", 2, 6, 100 << 10, Duration::from_secs(2))
                .await;
        outcome.assert_clean("memory, kept versions with promotions");
        assert!(outcome.stats.removals > 0, "{}", outcome.stats);
    }

    /// S3's versioned buckets' shape: keeping writes only, removals of kept and current versions.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kept_versions_keeping_only_are_clean() {
        let s = store(Arc::new(MemoryStore::new()));
        let outcome =
            kept_versions_keeping_only(&s, "kept/", 2, 6, 100 << 10, Duration::from_secs(2)).await;
        outcome.assert_clean("memory, keeping writes only");
        assert!(outcome.stats.removals > 0, "{}", outcome.stats);
    }

    /// A backend that drops kept-version records: the versions keeping puts replaced are gone, and the
    /// checker says so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kept_versions_dropped_by_the_backend_are_caught() {
        let broken = Arc::new(DropsKept::new(Arc::new(MemoryStore::new()), 0.3, 7));
        let s = store(broken.clone());
        let outcome = kept_versions(&s, "kept/", 2, 6, 100 << 10, Duration::from_secs(2)).await;
        let label = format!("memory, kept records dropped ({})", broken.dropped());
        outcome.assert_caught(&label, ViolationKind::LostVersion);
    }
}
