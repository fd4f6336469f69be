//! The clock a store reads for every time it writes or compares: intent leases, the reclaim queue's due times,
//! grace periods, fsck's minimum age, blob expiry and the time part of version ids.

use std::fmt::Debug;

use crate::base::version::VersionId;
#[cfg(any(test, feature = "conformance"))]
use crate::base::version::VersionSequence;
#[cfg(any(test, feature = "conformance"))]
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of wall-clock time for a store ([`crate::state::config::StoreConfig::clock`]).
pub trait Clock: Debug + Send + Sync {
    /// Microseconds since the Unix epoch. Clients sharing a backend must read clocks that agree to well within a
    /// third of the intent lease.
    fn now_micros(&self) -> u64;

    /// Draws a new version id for `now_micros`, a time this clock gave. The system clock's ids come from the
    /// process's sequence ([`VersionId::generate_at`]); a clock whose time is not the system's draws from a
    /// [`VersionSequence`] of its own, so that a time it jumped to never carries over into the ids of the others.
    fn draw_version(&self, now_micros: u64) -> VersionId {
        VersionId::generate_at(now_micros)
    }
}

/// The system's wall clock: the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> u64 {
        crate::base::version::now_micros()
    }
}

/// The system clock plus an offset that only grows: time flows as usual and [`OffsetClock::advance`] jumps it
/// forward, so that a test sees a lease or grace period run out without waiting for it. Timestamps written
/// before a jump read as that much older afterwards, as they would after a real wait. Tokio timers (the
/// intent renewals) do not jump: a put renewing its lease with this clock is one whose renewals are late.
///
/// Jumps of more than a minute in total model a clock skew that clients sharing a backend must not have (the
/// low-water marks of gc and the reclaim queue allow one minute): give every store of one backend the same
/// clock, or keep jumps short.
#[cfg(any(test, feature = "conformance"))]
#[derive(Debug, Default)]
pub struct OffsetClock {
    offset_micros: AtomicU64,
    /// The ids this clock draws: once it jumped ahead, they carry its time, which the system clock's must not.
    versions: VersionSequence,
}

#[cfg(any(test, feature = "conformance"))]
impl OffsetClock {
    /// A clock that reads the system time (no offset yet).
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self::default())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        self.offset_micros
            .fetch_add(crate::base::units::micros(by), Ordering::SeqCst);
    }
}

#[cfg(any(test, feature = "conformance"))]
impl Clock for OffsetClock {
    fn now_micros(&self) -> u64 {
        SystemClock
            .now_micros()
            .saturating_add(self.offset_micros.load(Ordering::SeqCst))
    }

    fn draw_version(&self, now_micros: u64) -> VersionId {
        self.versions.draw(now_micros)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::backend::memory::MemoryStore;
    use crate::backend::{BlobRef, ChunkStore, ChunkWrite};
    use crate::base::version::VersionId;
    use crate::state::config::{PutOptions, StoreConfig};
    use crate::store::BlobStore;
    use crate::upkeep::fsck::FsckOptions;

    /// The reclaim grace period and fsck's minimum age are measured by the store's clock: nothing is due
    /// before it has moved past them, and it need not be real time that moved.
    #[tokio::test]
    async fn grace_and_min_age_run_on_the_store_clock() {
        let backend = Arc::new(MemoryStore::new());
        let clock = OffsetClock::new();
        let grace = Duration::from_secs(30);
        let store = BlobStore::new(
            backend.clone(),
            StoreConfig::default()
                .with_grace(grace)
                .with_clock(clock.clone()),
        )
        .expect("store");
        let chunked = Bytes::from(vec![1u8; 300_000]);
        store
            .put("k", chunked, &PutOptions::new())
            .await
            .expect("put");
        store
            .put("k", Bytes::from_static(b"small"), &PutOptions::new())
            .await
            .expect("overwrite");
        let orphan = BlobRef {
            key: Bytes::from_static(b"orphan"),
            version: VersionId::generate(),
        };
        let chunk = ChunkWrite {
            salt: 0,
            index: 0,
            data: Bytes::from_static(b"nothing refers to this"),
        };
        backend
            .put_chunks(&orphan, vec![chunk])
            .await
            .expect("orphan chunk");
        let repair = FsckOptions::new().with_repair(true);

        let early = store.reclaim_due().await.expect("reclaim");
        assert_eq!(early.versions, 0, "within the grace period: {early:?}");
        let r = store.fsck(&repair).await.expect("fsck");
        assert!(r.orphans.iter().all(|o| !o.removed), "too young: {r:?}");

        clock.advance(grace + Duration::from_secs(1));
        let due = store.reclaim_due().await.expect("reclaim");
        assert_eq!(due.versions, 1, "the grace period is over: {due:?}");
        let r = store.fsck(&repair).await.expect("fsck");
        assert!(
            r.orphans.iter().any(|o| o.removed && o.key == orphan.key),
            "old enough: {r:?}"
        );
    }

    /// A store whose clock jumped an hour ahead draws ids of that time, and the ids of stores on the system
    /// clock in the same process stay at the system's time (they once continued from the jumped ones: fsck then
    /// found their orphans too young to repair, even with a minimum age of zero).
    #[tokio::test]
    async fn a_clock_that_jumped_ahead_keeps_its_times_out_of_the_other_stores_ids() {
        let jumped = OffsetClock::new();
        jumped.advance(Duration::from_secs(3600));
        let store = BlobStore::new(
            Arc::new(MemoryStore::new()),
            StoreConfig::default().with_clock(jumped.clone()),
        )
        .expect("store");
        let ahead = store
            .put("k", vec![1u8; 10], &PutOptions::new())
            .await
            .expect("put");
        let now_ms = crate::base::version::now_micros() / 1000;
        assert!(
            ahead.version.timestamp_millis() >= now_ms + 3_599_000,
            "{ahead:?}"
        );
        let system = VersionId::generate();
        assert!(
            system.timestamp_millis() <= crate::base::version::now_micros() / 1000,
            "{system} carries a time after now"
        );
        let plain =
            BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
        let put = plain
            .put("k", vec![1u8; 10], &PutOptions::new())
            .await
            .expect("put");
        assert!(put.version.timestamp_millis() <= crate::base::version::now_micros() / 1000);
        let next = store
            .put("k", vec![2u8; 10], &PutOptions::new())
            .await
            .expect("put");
        assert!(
            next.version > ahead.version,
            "the jumped clock's own ids still increase"
        );
    }
}
