//! gc's work in shares, each taken by a lease, so that several runners (every gateway, the CLI) share a pass
//! instead of each doing all of it: a share is the intents and the reclaim entries of 16 of the 256 shards
//! ([`crate::ledger::shards`]), and a runner handles only the shares it holds.
//!
//! A lease is a record in [`Namespace::Meta`] (`gc-share/` ‖ share) written with a compare-and-set: format byte 1,
//! the runner's id (16 random bytes), the lease's end (u64 LE, Unix µs). A runner takes a share whose record is
//! absent, expired or its own, and removes the record when its pass ends; a runner that dies leaves a lease that
//! another takes once it has expired. A runner stops taking up new entries a clock margin before its lease ends.
//! Leases make the work efficient, not safe: every step of a pass is safe when two runners do it at once (each
//! takeover and removal is a compare-and-set, chunk deletions are idempotent), as when clocks differ by more than
//! the margin. A store that one process owns ([`crate::backend::BackendInfo::exclusive`], an embedded engine) takes
//! no leases: nobody shares its work, and a process killed mid-pass must not hold the next one back.

use std::time::Duration;

use bytes::Bytes;

use crate::backend::{Namespace, Precondition, RecordWrite};
use crate::base::error::Result;
use crate::base::timing::CLOCK_MARGIN_MICROS;
use crate::base::units::micros;
use crate::format::decode::Reader;
use crate::state::Inner;

/// Shares of the work: shard `s` belongs to share `s % SHARES`. Part of the format (the lease keys).
pub(crate) const SHARES: u8 = 16;

/// How long a lease holds: a pass stops taking up new entries a clock margin before.
pub(crate) const LEASE: Duration = Duration::from_secs(5 * 60);

/// Prefix of the lease records in [`Namespace::Meta`].
const LEASE_KEY: &[u8] = b"gc-share/";

/// Format byte of a lease record.
const LEASE_FORMAT: u8 = 1;

/// The share shard `shard` belongs to.
pub(crate) fn share_of(shard: u8) -> u8 {
    shard % SHARES
}

/// The shares one pass works on.
#[derive(Debug)]
pub(crate) struct Held {
    /// For each share, the lease record this runner wrote, if it holds the share. `None` for a pass that takes no
    /// leases and works on every share.
    leases: Option<Vec<Option<Bytes>>>,
    /// When the leases end (Unix µs).
    until: u64,
}

impl Held {
    /// Every share, without leases: for passes that do not share their work (dry runs, passes under a prefix,
    /// a reclaim run on its own).
    pub(crate) fn all() -> Self {
        Self {
            leases: None,
            until: u64::MAX,
        }
    }

    /// Takes every share whose lease is free (absent, expired or unreadable), one compare-and-set each, for a
    /// runner `runner` at `now`.
    ///
    /// # Errors
    /// The backend's.
    pub(crate) async fn take(inner: &Inner, runner: [u8; 16], now: u64) -> Result<Self> {
        let until = now.saturating_add(micros(LEASE));
        let mut value = Vec::with_capacity(25);
        value.push(LEASE_FORMAT);
        value.extend_from_slice(&runner);
        value.extend_from_slice(&until.to_le_bytes());
        let value = Bytes::from(value);
        let mut leases = Vec::with_capacity(usize::from(SHARES));
        for share in 0..SHARES {
            let key = lease_key(share);
            let current = inner.backend.get_record(Namespace::Meta, &key).await?;
            let free = current
                .as_ref()
                .is_none_or(|c| lease_end(c).is_none_or(|end| end <= now));
            let cond = current.map_or(Precondition::Absent, Precondition::Equals);
            let taken = free
                && matches!(
                    inner
                        .backend
                        .put_record(Namespace::Meta, &key, value.clone(), &cond)
                        .await?,
                    RecordWrite::Done(_)
                );
            leases.push(taken.then(|| value.clone()));
        }
        Ok(Self {
            leases: Some(leases),
            until,
        })
    }

    /// Whether this pass works on shard `shard` (it holds its share).
    pub(crate) fn has(&self, shard: u8) -> bool {
        self.leases.as_ref().is_none_or(|l| {
            l.get(usize::from(share_of(shard)))
                .is_some_and(Option::is_some)
        })
    }

    /// Whether every share is this pass's.
    pub(crate) fn every(&self) -> bool {
        self.leases
            .as_ref()
            .is_none_or(|l| l.iter().all(Option::is_some))
    }

    /// Shares another runner held, left to it.
    pub(crate) fn skipped(&self) -> u64 {
        self.leases
            .as_ref()
            .map_or(0, |l| l.iter().filter(|v| v.is_none()).count() as u64)
    }

    /// Whether the pass may still take up an entry at `now`: a clock margin before its leases end.
    pub(crate) fn in_time(&self, now: u64) -> bool {
        now.saturating_add(CLOCK_MARGIN_MICROS) < self.until
    }

    /// Removes this runner's leases (best effort: one left expires).
    pub(crate) async fn release(self, inner: &Inner) {
        let Some(leases) = self.leases else {
            return;
        };
        for (share, value) in (0..SHARES).zip(leases) {
            let Some(value) = value else {
                continue;
            };
            let cond = Precondition::Equals(value);
            if let Err(e) = inner
                .backend
                .delete_record(Namespace::Meta, &lease_key(share), &cond)
                .await
            {
                tracing::warn!("could not release gc's lease of share {share} (it expires): {e}");
            }
        }
    }
}

/// The key of share `share`'s lease.
fn lease_key(share: u8) -> Vec<u8> {
    [LEASE_KEY, &[share]].concat()
}

/// The end of a lease record, `None` for one that does not decode (taken as free).
fn lease_end(record: &[u8]) -> Option<u64> {
    let corrupt = |detail: String| crate::base::error::Error::corrupt("gc lease", detail);
    let mut r = Reader::new(Bytes::copy_from_slice(record), &corrupt);
    if r.u8().ok()? != LEASE_FORMAT {
        return None;
    }
    r.u128_be().ok()?;
    let end = r.u64().ok()?;
    r.end().ok()?;
    Some(end)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::counting::CountingStore;
    use crate::backend::memory::MemoryStore;
    use crate::state::config::PutOptions;
    use crate::store::BlobStore;
    use crate::upkeep::gc::GcOptions;

    /// Three runners (three stores on one backend, as three gateways) run gc at once over a queue of 600 replaced
    /// versions, each chunk deletion taking a millisecond so that the passes overlap: every version's chunks are
    /// deleted exactly once, each share is held by one runner and skipped by the two others, and the leases are
    /// released at the end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_runners_share_a_pass_and_delete_each_version_once() {
        let backend = Arc::new(
            CountingStore::new(Arc::new(MemoryStore::new()))
                .with_delete_delay(Duration::from_millis(1)),
        );
        let config = crate::conformance::small_config();
        let stores: Vec<BlobStore> = (0..3)
            .map(|_| BlobStore::new(backend.clone(), config.clone()).expect("store"))
            .collect();
        let value = bytes::Bytes::from(vec![5u8; 5000]);
        for i in 0..600 {
            let key = format!("shared/{i}");
            for _ in 0..2 {
                stores[0]
                    .put(&key, value.clone(), &PutOptions::new())
                    .await
                    .expect("put");
            }
        }
        let opts = GcOptions::new();
        let passes = stores.iter().map(|s| s.gc(&opts));
        let reports = futures::future::try_join_all(passes).await.expect("gc");
        let deletes = backend.chunk_deletes();
        let duplicates = deletes.values().filter(|n| **n > 1).count();
        let versions: u64 = reports.iter().map(|r| r.reclaim.versions).sum();
        println!(
            "3 runners: versions reclaimed {:?}, shares skipped {:?}, duplicate deletions {duplicates}",
            reports
                .iter()
                .map(|r| r.reclaim.versions)
                .collect::<Vec<_>>(),
            reports.iter().map(|r| r.shares_skipped).collect::<Vec<_>>()
        );
        assert_eq!(
            (deletes.len(), versions, duplicates),
            (600, 600, 0),
            "{reports:?}"
        );
        let skipped: u64 = reports.iter().map(|r| r.shares_skipped).sum();
        assert_eq!(
            skipped,
            2 * u64::from(SHARES),
            "each share held by one runner: {reports:?}"
        );
        for store in &stores {
            assert_eq!(store.get("shared/0").await.expect("get"), value);
        }
        // The leases were released: a later pass holds every share.
        let again = stores[1].gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(
            (again.shares_skipped, again.reclaim.versions),
            (0, 0),
            "{again:?}"
        );
    }

    /// A runner killed while holding half the shares (its leases left in place): the next pass skips those
    /// shares and handles the others; once the leases have expired a pass takes them over and handles the rest.
    /// Every version is reclaimed, none twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_runners_shares_are_taken_over_once_its_leases_expire() {
        let backend = Arc::new(CountingStore::new(Arc::new(MemoryStore::new())));
        let clock = crate::base::clock::OffsetClock::new();
        let config = crate::conformance::small_config().with_clock(clock.clone());
        let store = BlobStore::new(backend.clone(), config).expect("store");
        let value = bytes::Bytes::from(vec![5u8; 5000]);
        let mut in_dead_shares = 0;
        for i in 0..200 {
            let key = format!("dead/{i}");
            if share_of(crate::ledger::shards::shard_of(key.as_bytes())) < SHARES / 2 {
                in_dead_shares += 1;
            }
            for _ in 0..2 {
                store
                    .put(&key, value.clone(), &PutOptions::new())
                    .await
                    .expect("put");
            }
        }
        let until = crate::base::clock::Clock::now_micros(&*clock) + micros(LEASE);
        for share in 0..SHARES / 2 {
            let mut record = vec![LEASE_FORMAT];
            record.extend_from_slice(&[9; 16]);
            record.extend_from_slice(&until.to_le_bytes());
            backend
                .counted()
                .put_record(
                    Namespace::Meta,
                    &lease_key(share),
                    record.into(),
                    &Precondition::None,
                )
                .await
                .expect("a dead runner's lease");
        }
        let first = store.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(first.shares_skipped, u64::from(SHARES / 2), "{first:?}");
        assert_eq!(first.reclaim.versions, 200 - in_dead_shares, "{first:?}");
        clock.advance(LEASE + Duration::from_secs(1));
        let second = store.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(
            (second.shares_skipped, second.reclaim.versions),
            (0, in_dead_shares),
            "{second:?}"
        );
        let deletes = backend.chunk_deletes();
        assert_eq!(deletes.len(), 200);
        assert!(deletes.values().all(|n| *n == 1), "none twice");
    }

    #[test]
    fn shards_fall_into_shares_evenly() {
        let mut counts = [0u32; SHARES as usize];
        for shard in crate::ledger::shards::all() {
            counts[usize::from(share_of(shard))] += 1;
        }
        assert!(counts.iter().all(|c| *c == 16), "{counts:?}");
        let mut record = vec![LEASE_FORMAT];
        record.extend_from_slice(&[7; 16]);
        record.extend_from_slice(&42u64.to_le_bytes());
        assert_eq!(lease_end(&record), Some(42));
        assert_eq!(lease_end(&record[..20]), None);
        record[0] = 2;
        assert_eq!(lease_end(&record), None);
    }
}
