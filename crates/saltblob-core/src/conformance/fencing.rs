//! Races between a put and the cleaners (gc, `fsck --repair`), staged with [`Faulty`]: a commit that stalls
//! past its lease, a version replaced while `fsck --repair` runs, a failed put whose chunk writes land late.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::faults::{Faulty, Point};
use super::gc::chunks_by_version;
use super::{assert_holds, data, prefix, repair_now, small_config, store};
use crate::backend::{ChunkStore, Namespace, SinkForm, SinkPlan};
use crate::base::clock::OffsetClock;
use crate::base::error::Error;
use crate::base::units::KIB;
use crate::state::config::PutOptions;
use crate::upkeep::gc::GcOptions;

/// A put whose manifest write stalls past its lease while its renewals fail, and meanwhile gc (grace 0) and
/// `fsck --repair` run from another client: the put commits and nothing of it was taken (a claimed intent), or
/// it fails and commits nothing (an atomic commit group, whose intent gc took over).
pub async fn commit_outlasting_its_lease_keeps_its_chunks(backend: Arc<dyn ChunkStore>) {
    let p = prefix("fence");
    let key = format!("{p}blob");
    let lease = Duration::from_secs(1);
    let clock = OffsetClock::new();
    let config = small_config()
        .with_intent_lease(lease)
        .with_clock(clock.clone());
    let faulty = Faulty::new(Arc::clone(&backend));
    let writer = store(&(faulty.clone() as Arc<dyn ChunkStore>), config.clone());
    // Another client of the same backend, as another process would be.
    let cleaner = store(&backend, config);
    let value = data(100 * KIB as usize, 5);

    let commit = faulty.hold(Point::RecordWrite(Namespace::Manifest));
    let put = tokio::spawn({
        let (writer, key, value) = (writer.clone(), key.clone(), value.clone());
        async move { writer.put(&key, value, &PutOptions::new()).await }
    });
    commit.reached().await;
    // From now on no renewal gets through: the lease runs out while the manifest write is held.
    faulty.fail(Point::RecordWrite(Namespace::ShardedIntent), true);
    clock.advance(lease + lease * 3 / 10);
    let gc = cleaner
        .gc(&GcOptions::new()
            .with_grace(Duration::ZERO)
            .with_prefix(p.clone()))
        .await
        .expect("gc");
    let fsck = cleaner.fsck(&repair_now(&p)).await.expect("fsck");
    commit.release();
    faulty.fail(Point::RecordWrite(Namespace::ShardedIntent), false);
    let taken = (
        gc.abandoned_puts,
        fsck.orphans.iter().filter(|o| o.removed).count(),
    );
    match put.await.expect("put task") {
        // A claimed intent outlasts the hold: gc and fsck left the put alone, and it committed.
        Ok(_) => {
            assert_holds(&cleaner, &key, &value).await;
            assert_eq!(
                taken,
                (0, 0),
                "the committed put was left alone: {gc:?} {fsck:?}"
            );
        }
        // Where the commit is an atomic group there is no claim: gc took the expired intent over, and the
        // group, which removes the intent only as last written, then failed as a whole.
        Err(e) => {
            assert!(
                matches!(cleaner.get(&key).await, Err(Error::NotFound { .. })),
                "the put failed ({e}) and committed nothing"
            );
            assert!(
                super::writes_commit_groups(&*backend),
                "a claimed put lost its commit: {e}"
            );
        }
    };
}

/// A version committed after `fsck --repair` read the manifests, and replaced while fsck compares its chunks
/// with the manifests, is queued for reclaim by its replacement: the repair leaves it to the reclaimer and its
/// readers' grace period.
pub async fn fsck_repair_spares_versions_replaced_while_it_runs(backend: Arc<dyn ChunkStore>) {
    let p = prefix("fsck-race");
    let key = format!("{p}blob");
    let faulty = Faulty::new(Arc::clone(&backend));
    let config = small_config().with_grace(Duration::from_secs(300));
    let store = store(&(faulty.clone() as Arc<dyn ChunkStore>), config.clone());
    // Another process, whose requests pass no hold.
    let other = super::store(&backend, config);
    let listing = faulty.hold(Point::ChunkScan);
    let fsck = tokio::spawn({
        let (store, p) = (store.clone(), p.clone());
        async move { store.fsck(&repair_now(&p)).await }
    });
    // fsck has read the manifests (none yet) and waits to list the chunks.
    listing.reached().await;
    let first = store
        .put(&key, data(50 * KIB as usize, 1), &PutOptions::new())
        .await
        .expect("put");
    // fsck lists the first version's chunks, then reads the manifest of their key.
    let lookup = faulty.hold(Point::RecordRead(Namespace::Manifest));
    listing.release();
    lookup.reached().await;
    let second = data(50 * KIB as usize, 2);
    other
        .put(&key, second.clone(), &PutOptions::new())
        .await
        .expect("replace");
    lookup.release();
    let report = fsck.await.expect("fsck task").expect("fsck");
    assert!(
        report.orphans.iter().all(|o| !o.removed),
        "nothing removed: {report:?}"
    );
    assert!(
        chunks_by_version(&backend, &key)
            .await
            .contains_key(&first.version),
        "the replaced version stays for its readers' grace period"
    );
    assert_holds(&store, &key, &second).await;
}

/// A put that fails mid-stream while chunk writes are in flight (issued to the engine, landing later) waits
/// for them before deleting its chunks: nothing of it is left behind, at once.
pub async fn failed_put_leaves_no_chunks_behind(backend: Arc<dyn ChunkStore>) {
    let p = prefix("failed-put");
    let key = format!("{p}blob");
    let faulty = Faulty::new(Arc::clone(&backend));
    let store = store(
        &(faulty.clone() as Arc<dyn ChunkStore>),
        small_config().with_max_blob_size(100 * KIB),
    );
    let writes = faulty.hold(Point::ChunkWrite);
    let (mut w, r) = tokio::io::duplex(16 * KIB as usize);
    let mut put = tokio::spawn({
        let (store, key) = (store.clone(), key.clone());
        async move { store.put_stream(&key, r, &PutOptions::new()).await }
    });
    // More than the limit: the put fails with chunk writes held in flight. (Fed from a task of its own: the
    // failed put stops reading.)
    let feeder = tokio::spawn(async move { w.write_all(&data(200 * KIB as usize, 3)).await });
    writes.reached().await;
    let early = tokio::time::timeout(Duration::from_millis(300), &mut put).await;
    writes.release();
    let outcome = match early {
        Ok(done) => done,
        Err(_) => put.await,
    };
    assert!(
        matches!(outcome.expect("put task"), Err(Error::TooLarge { .. })),
        "the put failed"
    );
    feeder.abort();
    // Real time for writes that were left in flight to land, if the put did not wait for them (a late write
    // is an event in the backend that no clock stands for).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let left = chunks_by_version(&backend, &key).await;
    assert!(left.is_empty(), "chunks left behind: {left:?}");
}

/// A put whose chunks fit one backend call (`StoreConfig::batch_bytes`), where the backend's sink leaves them to
/// the commit's atomic group ([`SinkForm::Commit`]), stores them in that group and takes no intent: with every
/// intent write failing it still commits, and with its manifest write failing it stores nothing at all (no
/// chunk, no intent). Where the sink stores them otherwise (plainly, unlogged, or as records in a file of their
/// own), the put takes its intent first, and cannot put without one.
pub async fn small_chunked_puts_store_nothing_before_their_commit(backend: Arc<dyn ChunkStore>) {
    let p = prefix("in-commit");
    let key = format!("{p}blob");
    let faulty = Faulty::new(Arc::clone(&backend));
    // Three chunks of 4 KiB: one call of `small_config`'s 16 KiB batches.
    let config = small_config();
    let writer = store(&(faulty.clone() as Arc<dyn ChunkStore>), config);
    let value = data(10 * KIB as usize, 7);
    let intents = || {
        let backend = Arc::clone(&backend);
        let key = key.clone();
        async move {
            crate::ledger::intent::stored(&*backend, Namespace::ShardedIntent)
                .await
                .expect("scan intents")
                .into_iter()
                .filter(|(k, _)| k.ends_with(key.as_bytes()))
                .count()
        }
    };

    faulty.fail(Point::RecordWrite(Namespace::ShardedIntent), true);
    let without_intents = writer.put(&key, value.clone(), &PutOptions::new()).await;
    faulty.fail(Point::RecordWrite(Namespace::ShardedIntent), false);
    let size = value.len() as u64;
    // Three chunks of 4 KiB, four to a call: what the put asks the backend's sink for.
    let plan = SinkPlan::new(4 * KIB as u32, Some(size), size, 4, true);
    if backend.chunk_sink(&plan).shape().form != SinkForm::Commit {
        assert!(
            without_intents.is_err(),
            "a chunked put that does not write its chunks in its commit needs its intent"
        );
        assert!(chunks_by_version(&backend, &key).await.is_empty());
        return;
    }
    let first =
        without_intents.expect("a put that writes its chunks in its commit writes no intent");
    assert_holds(&writer, &key, &value).await;
    assert_eq!(
        chunks_by_version(&backend, &key).await.get(&first.version),
        Some(&3),
        "its three chunks"
    );
    assert_eq!(intents().await, 0);

    faulty.fail(Point::RecordWrite(Namespace::Manifest), true);
    let failed = writer
        .put(&key, data(10 * KIB as usize, 8), &PutOptions::new())
        .await;
    faulty.fail(Point::RecordWrite(Namespace::Manifest), false);
    assert!(failed.is_err(), "the commit failed: {failed:?}");
    assert_holds(&writer, &key, &value).await;
    let stored: Vec<_> = chunks_by_version(&backend, &key)
        .await
        .into_keys()
        .collect();
    assert_eq!(
        stored,
        vec![first.version],
        "a failed commit stored no chunk of its version"
    );
    assert_eq!(intents().await, 0, "nor an intent");
}
