//! The conformance suite: the behaviour every backend must show, as `pub async fn` cases.
//!
//! A backend crate runs it with [`crate::conformance_suite!`], giving an expression that builds a fresh
//! [`Fixture`]. Cases use their own random key prefix, so a fixture may share one database between cases.
//! Cases panic with a message on failure (they are tests). It stands above every other folder.
//!
//! # Layout
//! - [`roundtrip`]: what is put reads back, in every layout, codec and policy.
//! - [`versions`]: overwrites, deletes, concurrent writers and readers of replaced versions.
//! - [`conditional`]: conditional puts and deletes, and the order of commits.
//! - [`reads`]: range reads and listing by prefix.
//! - [`failures`]: bad input and damaged data are refused or reported, and change nothing.
//! - [`gc`]: garbage collection, the intent lease and `fsck`.
//! - [`fencing`]: races between a put and the cleaners, staged with [`faults::Faulty`].
//! - [`segments`]: blobs composed of segments without copying, and their reclaim.
//! - [`encryption`]: sealed blobs read back, store no plaintext, and refuse missing keys and moved data
//!   ([`keyring`]: the keyrings of its cases, and of the sealed run of the whole suite).
//! - [`records`]: the record level of [`ChunkStore`] itself (preconditions, namespaces, ordered scans).
//! - [`passes`]: passes over the whole store by the backend's ranges, resumed, with a range that fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

pub mod conditional;
pub mod encryption;
pub mod failures;
pub mod faults;
pub mod fencing;
pub mod gc;
pub mod kept;
pub mod keyring;
pub mod passes;
pub mod reads;
pub mod records;
pub mod roundtrip;
pub mod segments;
pub mod versions;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncRead;

use crate::backend::{BlobRef, ChunkId, ChunkStore};
use crate::base::units::KIB;
use crate::format::layout::{Layout, LayoutPolicy};
use crate::format::manifest::Manifest;
use crate::state::config::StoreConfig;
use crate::store::BlobStore;

pub use conditional::{
    conditional_deletes_remove_only_the_named_version, conditional_puts,
    plain_and_conditional_commits_apply_in_order,
};
pub use encryption::{
    customer_keys_seal_and_only_the_same_key_reads,
    keys_are_chosen_per_put_and_missing_keys_are_typed_errors,
    moved_and_replayed_sealed_data_is_refused, sealed_blobs_round_trip_and_store_no_plaintext,
    sealed_segments_compose_and_read_back,
};
pub use failures::{
    bad_input_changes_nothing, corrupt_chunk_is_detected, corrupt_manifest_is_detected,
    size_hint_mismatch_changes_nothing,
};
pub use fencing::{
    commit_outlasting_its_lease_keeps_its_chunks, failed_put_leaves_no_chunks_behind,
    fsck_repair_spares_versions_replaced_while_it_runs,
    small_chunked_puts_store_nothing_before_their_commit,
};
pub use gc::{
    an_earlier_builds_queue_and_intents_are_drained,
    expired_blobs_read_as_not_found_and_gc_reclaims_them,
    fsck_reports_damage_and_repairs_only_orphans, gc_reclaims_abandoned_puts,
    gc_reclaims_replaced_and_deleted_versions, put_without_its_lease_does_not_commit,
};
pub use kept::{
    a_kept_copy_of_the_current_version_is_that_version,
    a_removed_version_stays_removed_when_an_earlier_kept_record_lands,
    concurrent_keeping_puts_keep_every_version, concurrent_removals_of_every_version_leave_none,
    kept_versions_change_their_metadata_in_place, kept_versions_read_back_and_outlive_gc_and_fsck,
    removing_versions_reclaims_them_and_promotes_the_newest_kept,
};
pub use passes::{
    a_pass_reads_every_manifest_once_and_resumes,
    a_range_that_cannot_be_read_is_reported_and_read_on_resume,
};
pub use reads::{list_by_prefix, range_reads};
pub use records::{
    record_groups_are_all_or_nothing, record_groups_carry_chunks,
    record_scan_from_before_the_prefix, record_scans_page_in_key_order,
    record_writes_check_preconditions, records_are_separate_per_namespace,
    records_of_a_partition_scan_and_drop_apart,
};
pub use roundtrip::{
    compression_round_trips, describe_layouts, partitions_stay_within_their_bound,
    per_put_overrides, roundtrip_default_policy_large, roundtrip_sizes,
    streaming_put_of_unknown_length,
};
pub use segments::{
    a_compose_landing_after_a_second_compose_was_replaced_keeps_its_chunks,
    a_compose_stalled_before_its_engine_write_commits_nothing,
    a_segment_discarded_during_its_compose_stays_with_the_composed_blob,
    abandoned_and_discarded_segments_are_reclaimed,
    composed_blobs_read_back_and_own_their_segments,
    leftover_segment_intents_do_not_reclaim_a_composed_blob,
};
pub use versions::{
    concurrent_puts_same_key, delete_then_get, metadata_changes_in_place_on_the_version_named,
    overwrite_larger_smaller_larger, readers_survive_overwrite_within_grace,
};

/// A backend for one case, and whatever must live as long as it (a temporary directory, a server).
pub struct Fixture {
    pub backend: Arc<dyn ChunkStore>,
    pub guard: Box<dyn Any + Send>,
}

impl Fixture {
    /// A fixture with nothing to keep alive.
    pub fn new(backend: Arc<dyn ChunkStore>) -> Self {
        Self {
            backend,
            guard: Box::new(()),
        }
    }
}

/// Generates one `#[tokio::test]` per conformance case; `$make` is an expression evaluating to a future of
/// [`Fixture`]. One attribute before it goes on every case, e.g. `#[ignore = "needs a cluster"]`.
///
/// `conformance_suite!(sealed $make)` runs every case with every store it makes sealing its puts
/// ([`sealed`]): the store's cases, not the record level's or encryption's own.
#[macro_export]
macro_rules! conformance_suite {
    (@case [$($attr:tt)*] $run:path; $make:expr; $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        $($attr)*
        async fn $case() {
            let fixture: $crate::conformance::Fixture = $make.await;
            $run($crate::conformance::$case(fixture.backend.clone())).await;
            drop(fixture);
        }
    };
    (@cases $attrs:tt $run:path; $make:expr; $($case:ident),* $(,)?) => {
        $( $crate::conformance_suite!(@case $attrs $run; $make; $case); )*
    };
    // The cases of the store's behaviour, run by `$run` (`plain` or `sealed`).
    (@store $attrs:tt $run:path; $make:expr) => {
        $crate::conformance_suite!(@cases $attrs $run; $make;
            roundtrip_sizes, roundtrip_default_policy_large, overwrite_larger_smaller_larger, delete_then_get,
            range_reads, list_by_prefix, describe_layouts, streaming_put_of_unknown_length,
            partitions_stay_within_their_bound,
            size_hint_mismatch_changes_nothing, conditional_puts, corrupt_chunk_is_detected,
            corrupt_manifest_is_detected, bad_input_changes_nothing, concurrent_puts_same_key,
            compression_round_trips, readers_survive_overwrite_within_grace, per_put_overrides,
            gc_reclaims_replaced_and_deleted_versions, gc_reclaims_abandoned_puts,
            put_without_its_lease_does_not_commit, fsck_reports_damage_and_repairs_only_orphans,
            commit_outlasting_its_lease_keeps_its_chunks,
            fsck_repair_spares_versions_replaced_while_it_runs, failed_put_leaves_no_chunks_behind,
            small_chunked_puts_store_nothing_before_their_commit,
            plain_and_conditional_commits_apply_in_order, composed_blobs_read_back_and_own_their_segments,
            abandoned_and_discarded_segments_are_reclaimed,
            leftover_segment_intents_do_not_reclaim_a_composed_blob,
            conditional_deletes_remove_only_the_named_version,
            a_segment_discarded_during_its_compose_stays_with_the_composed_blob,
            a_compose_landing_after_a_second_compose_was_replaced_keeps_its_chunks,
            a_compose_stalled_before_its_engine_write_commits_nothing,
            expired_blobs_read_as_not_found_and_gc_reclaims_them,
            an_earlier_builds_queue_and_intents_are_drained,
            metadata_changes_in_place_on_the_version_named,
            kept_versions_read_back_and_outlive_gc_and_fsck,
            removing_versions_reclaims_them_and_promotes_the_newest_kept,
            a_kept_copy_of_the_current_version_is_that_version,
            concurrent_keeping_puts_keep_every_version,
            concurrent_removals_of_every_version_leave_none,
            kept_versions_change_their_metadata_in_place,
            a_removed_version_stays_removed_when_an_earlier_kept_record_lands);
    };
    (@sealed $attrs:tt $make:expr) => {
        $crate::conformance_suite!(@store $attrs $crate::conformance::sealed; $make);
    };
    // The store's cases, then the record level's and encryption's own.
    (@with $attrs:tt $make:expr) => {
        $crate::conformance_suite!(@store $attrs $crate::conformance::plain; $make);
        $crate::conformance_suite!(@cases $attrs $crate::conformance::plain; $make;
            record_writes_check_preconditions, record_groups_are_all_or_nothing,
            record_groups_carry_chunks, records_are_separate_per_namespace, record_scans_page_in_key_order, record_scan_from_before_the_prefix, records_of_a_partition_scan_and_drop_apart,
            a_pass_reads_every_manifest_once_and_resumes,
            a_range_that_cannot_be_read_is_reported_and_read_on_resume,
            sealed_blobs_round_trip_and_store_no_plaintext,
            keys_are_chosen_per_put_and_missing_keys_are_typed_errors,
            moved_and_replayed_sealed_data_is_refused, sealed_segments_compose_and_read_back,
            customer_keys_seal_and_only_the_same_key_reads);
    };
    (sealed #[$attr:meta] $make:expr) => {
        $crate::conformance_suite!(@sealed [#[$attr]] $make);
    };
    (sealed $make:expr) => {
        $crate::conformance_suite!(@sealed [] $make);
    };
    (#[$attr:meta] $make:expr) => {
        $crate::conformance_suite!(@with [#[$attr]] $make);
    };
    ($make:expr) => {
        $crate::conformance_suite!(@with [] $make);
    };
}

tokio::task_local! {
    /// The encryption every store a case makes ([`store`]) seals its puts with, in a [`sealed`] run.
    static SEALING: keyring::SealingRun;
}

/// Runs case `case` as it is.
pub async fn plain<F: std::future::Future<Output = ()>>(case: F) {
    case.await;
}

/// Runs case `case` with every store it makes through this module sealing its puts under a key of a keyring of
/// its own (`tenant-a`, the local provider), unless the case configures encryption itself.
pub async fn sealed<F: std::future::Future<Output = ()>>(case: F) {
    let run = keyring::SealingRun::new();
    let stores = Arc::clone(&run.stores);
    SEALING.scope(run, case).await;
    assert!(
        stores.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the case made no store through conformance::store: it ran unsealed"
    );
}

/// Whether `backend`'s puts commit with atomic groups ([`crate::backend::SinkShape::commit_group`] of the sink it
/// hands a small put): such a backend must write groups of records atomically.
pub fn writes_commit_groups(backend: &dyn ChunkStore) -> bool {
    let plan = crate::backend::SinkPlan::new(64 * 1024, Some(1), 1, 1, true);
    backend.chunk_sink(&plan).shape().commit_group
}

/// The small policy the cases use, so that every layout shows up with small blobs: inline up to 1000 bytes,
/// 4 KiB chunks at every size, one partition up to 64 KiB, at most 7 salts, a 128 KiB window, 16 KiB batches, no
/// grace.
pub fn small_config() -> StoreConfig {
    StoreConfig::default()
        .with_policy(
            LayoutPolicy::default()
                .with_inline_limit(1000)
                .with_single_chunk_size(4096)
                .with_fanout_threshold(64 * KIB)
                .with_max_salt(7),
        )
        .with_inflight_bytes(128 * KIB as usize)
        .with_batch_bytes(16 * KIB as usize)
        .with_grace(Duration::ZERO)
}

fn store(backend: &Arc<dyn ChunkStore>, config: StoreConfig) -> BlobStore {
    let config = match SEALING.try_with(keyring::SealingRun::config) {
        Ok(sealing) if config.encryption.is_none() => config.with_encryption(sealing),
        _ => config,
    };
    BlobStore::new(Arc::clone(backend), config).expect("valid config")
}

/// A random key prefix for one case.
pub fn prefix(case: &str) -> String {
    format!("{case}-{:016x}/", rand::random::<u64>())
}

/// `len` pseudo-random bytes (incompressible), different for each `seed`.
pub fn data(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// After a load under `prefix`: reclaims everything due (gc, grace 0) and returns what `fsck` then finds left
/// over (nothing is removed). The hot-key tests assert on it what `docs/guarantees.md` promises per backend.
pub async fn orphans_after_gc(store: &BlobStore, prefix: &str) -> Vec<crate::upkeep::fsck::Orphan> {
    store
        .gc(&crate::upkeep::gc::GcOptions::new()
            .with_grace(Duration::ZERO)
            .with_prefix(prefix.to_owned()))
        .await
        .expect("gc");
    let report = store
        .fsck(&crate::upkeep::fsck::FsckOptions::new().with_prefix(prefix.to_owned()))
        .await
        .expect("fsck");
    assert!(report.damaged.is_empty(), "{prefix}: {report:?}");
    report.orphans
}

/// `fsck --repair` of the keys under `prefix`, with no minimum age: every orphan found is removed now.
pub fn repair_now(prefix: &str) -> crate::upkeep::fsck::FsckOptions {
    crate::upkeep::fsck::FsckOptions::new()
        .with_repair(true)
        .with_min_age(Duration::ZERO)
        .with_prefix(prefix.to_owned())
}

/// A reader that hands out its data in pieces of odd sizes, like a pipe.
struct Trickle {
    data: Bytes,
    step: usize,
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = self.data.len().min(buf.remaining()).min(self.step);
        let piece = self.data.split_to(n);
        buf.put_slice(&piece);
        self.step = self.step % 7919 + 1013;
        std::task::Poll::Ready(Ok(()))
    }
}

fn trickle(data: &Bytes) -> Trickle {
    Trickle {
        data: data.clone(),
        step: 1,
    }
}

async fn assert_holds(store: &BlobStore, key: &str, expected: &Bytes) -> Manifest {
    let got = store
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"));
    assert!(
        got == *expected,
        "{key}: read {} bytes that differ from the {} written",
        got.len(),
        expected.len()
    );
    let m = store.head(key).await.expect("head");
    assert_eq!(m.size, expected.len() as u64, "{key}: size");
    assert!(digest_matches(&m, expected), "{key}: digest");
    m
}

/// Whether `m`'s digest is that of `data`: its BLAKE3, or for a sealed version a keyed one, which `get` checks
/// (so here only: not the plain BLAKE3, which would leak the plaintext's).
pub fn digest_matches(m: &Manifest, data: &[u8]) -> bool {
    let plain = *blake3::hash(data).as_bytes();
    if m.sealing.is_some() {
        m.digest != plain
    } else {
        m.digest == plain
    }
}

async fn chunk_present(backend: &Arc<dyn ChunkStore>, key: &str, m: &Manifest, index: u64) -> bool {
    let Layout::Chunked(l) = m.layout() else {
        return false;
    };
    let blob = BlobRef {
        key: Bytes::copy_from_slice(key.as_bytes()),
        version: m.version,
    };
    let slots = backend
        .get_chunks(
            &blob,
            &[ChunkId {
                salt: l.salt_of(index),
                index,
            }],
        )
        .await
        .expect("get_chunks");
    slots.into_iter().next().flatten().is_some()
}

fn expected_kind(size: u64) -> &'static str {
    if size <= 1000 {
        "inline"
    } else if size <= 64 * KIB {
        "single-partition"
    } else {
        "salted"
    }
}
