//! This process's clock against the cluster's ([`ChunkStore::cluster_time`]). On a backend that processes on
//! several machines share, plain writes win by their client's timestamp and gc decides by its runner's clock: a
//! process whose clock is off the cluster's by more than [`CLOCK_MARGIN_MICROS`] refuses both, naming the skew.
//! A backend whose time is this machine's (an embedded store) has nothing to check.
//!
//! gc and reclaim check before each pass ([`check`]). Plain writes check through [`WriteClock`], which keeps an
//! agreement for [`RECHECK_AFTER`], so that at most one write in that time pays the round trip.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::ChunkStore;
use crate::base::clock::{Clock, SystemClock};
use crate::base::error::{Error, Result};
use crate::base::timing::CLOCK_MARGIN_MICROS;

/// How long an agreement of the clocks stands for plain writes before the next write reads the cluster's time
/// again: a clock that steps away from the cluster's is refused within this. Thirty seconds.
pub(crate) const RECHECK_AFTER: Duration = Duration::from_secs(30);

/// How long an agreement stands when the cluster's time cannot be read (a node down, a timeout): a write then goes
/// on rather than fail on the check alone. Five minutes; past that, the read's error is the write's.
pub(crate) const STANDS_UNREAD: Duration = Duration::from_secs(300);

/// Checks this machine's clock against the cluster's before `what` (a pass, a write). The machine's clock is the
/// system's, not the store's ([`crate::state::config::StoreConfig::clock`]): a test's clock jumped forward stands
/// for time passing, not for a skewed machine. `Ok(false)`: the backend has no time of its own, nothing checked.
///
/// # Errors
/// A backend error (not retryable) naming the skew, when it exceeds [`CLOCK_MARGIN_MICROS`] beyond the round
/// trip's precision; the backend's errors reading its time.
pub(crate) async fn check(backend: &dyn ChunkStore, what: &str) -> Result<bool> {
    let before = SystemClock.now_micros();
    let Some(cluster) = backend.cluster_time().await? else {
        return Ok(false);
    };
    let after = SystemClock.now_micros();
    let here = before / 2 + after / 2;
    let slack = CLOCK_MARGIN_MICROS.saturating_add(after.saturating_sub(before) / 2);
    let (off, way) = if here >= cluster {
        (here - cluster, "ahead of")
    } else {
        (cluster - here, "behind")
    };
    if off > slack {
        return Err(Error::backend(
            "clock",
            format!(
                "{what} refused: this process's clock is {:.1} s {way} the cluster's (the margin is {} s); \
                 set the clock right (NTP) and try again",
                off as f64 / 1e6,
                CLOCK_MARGIN_MICROS / 1_000_000
            ),
            false,
        ));
    }
    Ok(true)
}

/// The clock check of plain writes (a put's intent, a commit that expects nothing): a writer whose clock lags
/// the cluster's would lose last-write-wins to earlier writes, and write intents below gc's low-water mark; one
/// ahead would win over later writes. An agreement stands for [`RECHECK_AFTER`] (for [`STANDS_UNREAD`] when
/// the cluster's time cannot be read); a refusal does not stand: the next write checks again.
#[derive(Debug, Default)]
pub(crate) struct WriteClock {
    /// When the clocks last agreed (Tokio's clock, which tests may pause).
    agreed: tokio::sync::Mutex<Option<Instant>>,
    /// Set once the backend said it has no time of its own: nothing to check, ever.
    unclocked: AtomicBool,
}

impl WriteClock {
    /// Checks the clock for a plain write on `backend` (see the type).
    ///
    /// # Errors
    /// As [`check`], `what` being "write".
    pub(crate) async fn check(&self, backend: &dyn ChunkStore) -> Result<()> {
        if self.unclocked.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Held across the read: writes that find the agreement old wait for one read, not one each.
        let mut agreed = self.agreed.lock().await;
        let age = agreed.map(|at| at.elapsed());
        if age.is_some_and(|age| age < RECHECK_AFTER) {
            return Ok(());
        }
        match check(backend, "write").await {
            Ok(true) => *agreed = Some(Instant::now()),
            Ok(false) => self.unclocked.store(true, Ordering::Relaxed),
            Err(e) if e.is_retryable() && age.is_some_and(|age| age < STANDS_UNREAD) => {
                tracing::debug!(
                    "the cluster's time could not be read; the last agreement stands: {e}"
                );
            }
            Err(e) => {
                *agreed = None;
                return Err(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, AtomicUsize};

    use super::*;
    use crate::backend::layer::ChunkStoreLayer;
    use crate::backend::memory::MemoryStore;
    use crate::conformance::small_config;
    use crate::state::config::{PutCondition, PutOptions};
    use crate::store::BlobStore;

    /// Minutes in µs.
    const MINUTE: i64 = 60_000_000;

    /// A backend whose cluster time is this machine's shifted by `ahead` µs (`None`: the backend has no time of its
    /// own), or unreadable while `unreadable` holds; it counts the reads.
    #[derive(Debug)]
    struct Cluster {
        inner: Arc<MemoryStore>,
        ahead: AtomicI64,
        clocked: bool,
        unreadable: AtomicBool,
        reads: AtomicUsize,
    }

    impl Cluster {
        fn new(inner: Arc<MemoryStore>, clocked: bool) -> Arc<Self> {
            Arc::new(Cluster {
                inner,
                ahead: AtomicI64::new(0),
                clocked,
                unreadable: AtomicBool::new(false),
                reads: AtomicUsize::new(0),
            })
        }

        fn reads(&self) -> usize {
            self.reads.load(Ordering::Relaxed)
        }
    }

    #[async_trait::async_trait]
    impl ChunkStoreLayer for Cluster {
        fn inner(&self) -> &dyn ChunkStore {
            &*self.inner
        }

        async fn cluster_time(&self) -> Result<Option<u64>> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            if self.unreadable.load(Ordering::Relaxed) {
                return Err(Error::backend("test", "the node did not answer", true));
            }
            let now = SystemClock.now_micros();
            Ok(self
                .clocked
                .then(|| now.saturating_add_signed(self.ahead.load(Ordering::Relaxed))))
        }
    }

    fn store(cluster: &Arc<Cluster>) -> BlobStore {
        BlobStore::new(Arc::clone(cluster) as Arc<dyn ChunkStore>, small_config()).expect("store")
    }

    /// Chunks and records of every kind in the backend: what a refused write must not have added to.
    async fn records(backend: &MemoryStore) -> usize {
        use crate::backend::Namespace as N;
        let mut n = backend.chunk_count().expect("chunks");
        for ns in [
            N::Manifest,
            N::Reclaim,
            N::Meta,
            N::Intent,
            N::ShardedIntent,
            N::ParkedIntent,
            N::ReclaimBucket,
            N::ExpiryBucket,
        ] {
            n += backend
                .scan_records(ns, b"", None, usize::MAX)
                .await
                .expect("scan")
                .len();
        }
        n
    }

    /// A process 12 minutes behind the cluster (its plain writes would lose last-write-wins to earlier ones, its
    /// intents land below gc's mark) or ahead of it refuses plain puts, chunked puts and plain deletes before
    /// writing anything, naming the skew; a conditional write (the cluster's own timestamp) and reads go on;
    /// within the margin everything goes on; set right, the next write is taken.
    #[tokio::test]
    async fn plain_writes_refuse_a_clock_off_the_clusters() {
        for (ahead, way) in [(12 * MINUTE, "behind"), (-12 * MINUTE, "ahead of")] {
            let backend = Arc::new(MemoryStore::new());
            let cluster = Cluster::new(Arc::clone(&backend), true);
            let agreed = store(&cluster);
            agreed
                .put("old", vec![1u8; 100], &PutOptions::new())
                .await
                .expect("put while the clocks agree");
            cluster.ahead.store(ahead, Ordering::Relaxed);
            // A process started with its clock off: its first write reads the cluster's time.
            let skewed = store(&cluster);
            let before = records(&backend).await;
            for (what, outcome) in [
                (
                    "small put",
                    skewed
                        .put("k", vec![2u8; 100], &PutOptions::new())
                        .await
                        .map(drop),
                ),
                (
                    "chunked put",
                    skewed
                        .put("big", vec![3u8; 300_000], &PutOptions::new())
                        .await
                        .map(drop),
                ),
                (
                    "chunked put if absent",
                    skewed
                        .put(
                            "big2",
                            vec![3u8; 300_000],
                            &PutOptions::new().with_condition(PutCondition::IfAbsent),
                        )
                        .await
                        .map(drop),
                ),
                ("delete", skewed.delete("old").await.map(drop)),
            ] {
                let err = outcome.expect_err(what).to_string();
                assert!(
                    err.contains("write refused")
                        && err.contains(&format!("720.0 s {way}"))
                        && err.contains("margin is 60 s"),
                    "{what}: {err}"
                );
            }
            assert_eq!(
                records(&backend).await,
                before,
                "a refused write wrote nothing"
            );
            assert_eq!(
                skewed.get("old").await.expect("reads go on"),
                vec![1u8; 100]
            );
            skewed
                .put(
                    "new",
                    vec![4u8; 100],
                    &PutOptions::new().with_condition(PutCondition::IfAbsent),
                )
                .await
                .expect("a small conditional put takes the cluster's timestamp");
            cluster.ahead.store(30_000_000, Ordering::Relaxed);
            skewed
                .put("k", vec![2u8; 300_000], &PutOptions::new())
                .await
                .expect("within the margin, and the refusal did not stand");
            skewed
                .delete("old")
                .await
                .expect("delete within the margin");
        }
    }

    /// An agreement stands for RECHECK_AFTER: a thousand writes read the cluster's time once, the first write after
    /// it reads it again. Unreadable, the agreement stands up to STANDS_UNREAD; past that, or with no agreement
    /// yet, the read's error fails the write. A backend without a time is asked once.
    #[tokio::test(start_paused = true)]
    async fn an_agreement_stands_for_a_while_and_a_missing_time_is_asked_once() {
        let cluster = Cluster::new(Arc::new(MemoryStore::new()), true);
        let s = store(&cluster);
        cluster.unreadable.store(true, Ordering::Relaxed);
        let err = s
            .put("k", vec![0u8; 10], &PutOptions::new())
            .await
            .expect_err("no agreement yet");
        assert!(
            err.to_string().contains("did not answer") && err.is_retryable(),
            "{err}"
        );
        cluster.unreadable.store(false, Ordering::Relaxed);
        let reads = cluster.reads();
        for i in 0..1000 {
            s.put(&format!("k{i}"), vec![0u8; 10], &PutOptions::new())
                .await
                .expect("put");
        }
        assert_eq!(cluster.reads() - reads, 1, "one read for a thousand writes");
        tokio::time::advance(RECHECK_AFTER).await;
        s.put("k", vec![0u8; 10], &PutOptions::new())
            .await
            .expect("put");
        assert_eq!(
            cluster.reads() - reads,
            2,
            "read again after {RECHECK_AFTER:?}"
        );
        cluster.unreadable.store(true, Ordering::Relaxed);
        tokio::time::advance(RECHECK_AFTER).await;
        s.put("k", vec![0u8; 10], &PutOptions::new())
            .await
            .expect("the agreement stands unread");
        tokio::time::advance(STANDS_UNREAD).await;
        s.put("k", vec![0u8; 10], &PutOptions::new())
            .await
            .expect_err("too old to stand");

        let unclocked = Cluster::new(Arc::new(MemoryStore::new()), false);
        let s = store(&unclocked);
        for i in 0..10 {
            s.put(&format!("k{i}"), vec![0u8; 10], &PutOptions::new())
                .await
                .expect("put");
            s.delete(&format!("k{i}")).await.expect("delete");
        }
        assert_eq!(
            unclocked.reads(),
            1,
            "a backend without a time is asked once"
        );
    }
}
