//! Passes on the memory store as it is (one range in key order) and split into ranges by a layer, with one range
//! failing, transient failures, interruptions and resumes, and keys that are not UTF-8.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use super::*;
use crate::backend::layer::ChunkStoreLayer;
use crate::backend::memory::MemoryStore;
use crate::backend::{ChunkStore, RangePage, ScanPlan};
use crate::state::config::{PutOptions, StoreConfig};

/// The memory store's manifests split into `ranges` ranges by a hash of the key, each in key order, read by
/// [`ChunkStore::scan_manifest_range`]; the reads of one range can be made to fail.
#[derive(Debug)]
struct Split {
    inner: MemoryStore,
    ranges: u8,
    /// A range whose reads fail, and with which error.
    failing: Mutex<Option<(u8, bool)>>,
    /// How many more reads of the failing range fail (then it heals); `u32::MAX`: all.
    failures_left: AtomicU32,
    /// Reads of each range.
    reads: Mutex<BTreeMap<u8, u32>>,
}

impl Split {
    fn new(ranges: u8) -> Self {
        Self {
            inner: MemoryStore::new(),
            ranges,
            failing: Mutex::new(None),
            failures_left: AtomicU32::new(0),
            reads: Mutex::new(BTreeMap::new()),
        }
    }

    fn range_of(&self, key: &[u8]) -> u8 {
        let h = key
            .iter()
            .fold(17u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(*b)));
        u8::try_from(h % u32::from(self.ranges)).unwrap()
    }

    /// Fails the next `times` reads of range `range`, with a retryable error or not.
    fn fail(&self, range: u8, retryable: bool, times: u32) {
        *self.failing.lock().unwrap() = Some((range, retryable));
        self.failures_left.store(times, Ordering::SeqCst);
    }
}

#[async_trait]
impl ChunkStoreLayer for Split {
    fn inner(&self) -> &dyn ChunkStore {
        &self.inner
    }

    async fn manifest_ranges(&self) -> Result<ScanPlan> {
        Ok(ScanPlan {
            ranges: (0..self.ranges)
                .map(|r| ScanRange::from_bytes(vec![b'r', r]))
                .collect(),
            in_flight: 3,
        })
    }

    async fn scan_manifest_range(
        &self,
        range: &ScanRange,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<RangePage> {
        let [b'r', r] = range.as_bytes() else {
            return Err(Error::invalid("range", "not one of this store's"));
        };
        *self.reads.lock().unwrap().entry(*r).or_default() += 1;
        if let Some((failing, retryable)) = *self.failing.lock().unwrap()
            && failing == *r
            && self
                .failures_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n > 0).then(|| if n == u32::MAX { n } else { n - 1 })
                })
                .is_ok()
        {
            return Err(Error::backend("split", "injected range failure", retryable));
        }
        // Every record after `after`, of this range only, in key order; short pages now and then.
        let all = self
            .inner
            .scan_records(Namespace::Manifest, b"", after, usize::MAX)
            .await?;
        let mine: Vec<_> = all
            .into_iter()
            .filter(|(k, _)| self.range_of(k) == *r)
            .collect();
        let take = limit.min(7);
        Ok(RangePage {
            done: mine.len() <= take,
            records: mine.into_iter().take(take).collect(),
        })
    }
}

async fn store_on(backend: Arc<dyn ChunkStore>) -> BlobStore {
    BlobStore::new(backend, StoreConfig::default()).unwrap()
}

/// Keys `k/000` to `k/{n-1}`, and two that are not UTF-8.
async fn fill(store: &BlobStore, n: usize) -> Vec<Bytes> {
    let mut keys: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("k/{i:03}"))).collect();
    keys.push(Bytes::from_static(b"bin/\xff\xfe\x00"));
    keys.push(Bytes::from_static(b"bin/\xc3\x28"));
    for key in &keys {
        store
            .put(key.clone(), key.to_vec(), &PutOptions::new())
            .await
            .unwrap();
    }
    keys.sort();
    keys
}

/// Runs a pass from `progress` to its end or until `stop_after` entries were handled, recording each entry as
/// handled; returns the keys handled and the ranges reported unread.
async fn run(
    store: &BlobStore,
    progress: &mut PassProgress,
    opts: &PassOptions,
    stop_after: Option<usize>,
) -> (Vec<Bytes>, Vec<usize>) {
    let mut seen = Vec::new();
    let mut unread = Vec::new();
    let mut events = store.pass(progress, opts);
    'pass: while let Some(event) = events.next().await {
        match event {
            PassEvent::Page(page) => {
                for entry in &page.entries {
                    if stop_after.is_some_and(|n| seen.len() >= n) {
                        break 'pass;
                    }
                    assert_eq!(
                        entry.manifest.as_ref().unwrap().size,
                        entry.key.len() as u64
                    );
                    seen.push(entry.key.clone());
                    progress.record_key(page.range, &entry.key);
                }
                progress.record_page(&page);
            }
            PassEvent::Unread { range, .. } => unread.push(range),
        }
    }
    (seen, unread)
}

fn sorted(mut keys: Vec<Bytes>) -> Vec<Bytes> {
    keys.sort();
    keys
}

#[tokio::test]
async fn a_store_that_does_not_split_is_one_range_in_key_order() {
    let store = store_on(Arc::new(MemoryStore::new())).await;
    let keys = fill(&store, 2 * PASS_PAGE + 5).await;
    let mut progress = store.plan_pass(b"").await.unwrap();
    assert!(progress.is_ordered());
    assert_eq!(progress.range_count(), 1);
    let (seen, unread) = run(&store, &mut progress, &PassOptions::new(), None).await;
    assert!(unread.is_empty());
    assert_eq!(seen, keys, "every key once, in key order");
    assert!(progress.is_complete());

    // Under a prefix: its keys only.
    let mut under = store.plan_pass(b"bin/").await.unwrap();
    let (seen, _) = run(&store, &mut under, &PassOptions::new(), None).await;
    assert_eq!(seen, keys[..2].to_vec());
}

#[tokio::test]
async fn ranges_are_read_at_once_and_each_key_once() {
    let split = Arc::new(Split::new(5));
    let store = store_on(split.clone()).await;
    let keys = fill(&store, 120).await;
    let mut progress = store.plan_pass(b"").await.unwrap();
    assert_eq!((progress.range_count(), progress.is_ordered()), (5, false));
    let (seen, unread) = run(&store, &mut progress, &PassOptions::new(), None).await;
    assert!(unread.is_empty());
    assert_eq!(sorted(seen), keys);
    assert!(progress.is_complete());
    assert!(
        split.reads.lock().unwrap().values().all(|n| *n > 1),
        "paged"
    );

    // A pass under a prefix reads in key order, not by the backend's ranges.
    let mut under = store.plan_pass(b"k/1").await.unwrap();
    assert!(under.is_ordered());
    let (seen, _) = run(&store, &mut under, &PassOptions::new(), None).await;
    assert_eq!(seen, keys[102..].to_vec(), "k/100 to k/119, in order");
}

#[tokio::test]
async fn an_interrupted_pass_resumes_from_its_text_and_handles_no_key_twice() {
    let split = Arc::new(Split::new(4));
    let store = store_on(split.clone()).await;
    let keys = fill(&store, 90).await;
    let mut progress = store.plan_pass(b"").await.unwrap();
    let mut handled = Vec::new();
    // Stopped three times, each after a few keys, and read back from text each time.
    for stop in [1, 17, 30] {
        let (seen, unread) = run(&store, &mut progress, &PassOptions::new(), Some(stop)).await;
        assert!(unread.is_empty());
        assert_eq!(seen.len(), stop);
        handled.extend(seen);
        let text = progress.to_text();
        progress = PassProgress::from_text(&text).unwrap();
        assert_eq!(progress.to_text(), text);
    }
    assert!(!progress.is_complete());
    let (rest, _) = run(
        &store,
        &mut progress,
        &PassOptions::new().with_in_flight(1),
        None,
    )
    .await;
    handled.extend(rest);
    assert_eq!(
        sorted(handled),
        keys,
        "every key handled once over the runs"
    );
    assert!(progress.is_complete());
    let (again, _) = run(&store, &mut progress, &PassOptions::new(), None).await;
    assert!(again.is_empty(), "a complete pass reads nothing");
}

#[tokio::test]
async fn a_range_that_keeps_failing_is_reported_unread_and_read_on_resume() {
    let split = Arc::new(Split::new(4));
    let store = store_on(split.clone()).await;
    let keys = fill(&store, 60).await;
    let lost: Vec<Bytes> = keys
        .iter()
        .filter(|k| split.range_of(k) == 2)
        .cloned()
        .collect();
    assert!(!lost.is_empty());
    split.fail(2, false, u32::MAX);
    let mut progress = store.plan_pass(b"").await.unwrap();
    let (seen, unread) = run(&store, &mut progress, &PassOptions::new(), None).await;
    assert_eq!(unread, [2], "the failing range is named");
    assert_eq!(
        seen.len() + lost.len(),
        keys.len(),
        "the others were read whole"
    );
    assert!(seen.iter().all(|k| !lost.contains(k)));
    assert_eq!(progress.ranges_done(), 3);
    assert_eq!(progress.ranges().nth(2).unwrap().1, &RangeState::Pending);

    split.fail(2, false, 0);
    let (rest, unread) = run(&store, &mut progress, &PassOptions::new(), None).await;
    assert!(unread.is_empty());
    assert_eq!(
        sorted(rest),
        lost,
        "the resumed pass reads the unread range only"
    );
    assert!(progress.is_complete());
}

#[tokio::test]
async fn transient_failures_are_retried() {
    let split = Arc::new(Split::new(3));
    let store = store_on(split.clone()).await;
    let keys = fill(&store, 30).await;
    split.fail(1, true, 2);
    let mut progress = store.plan_pass(b"").await.unwrap();
    let (seen, unread) = run(&store, &mut progress, &PassOptions::new(), None).await;
    assert!(unread.is_empty());
    assert_eq!(sorted(seen), keys);
}

#[tokio::test]
async fn expired_blobs_are_read_only_when_asked() {
    let clock = crate::base::clock::OffsetClock::new();
    let store = BlobStore::new(
        Arc::new(MemoryStore::new()),
        StoreConfig::default().with_clock(clock.clone()),
    )
    .unwrap();
    store
        .put("live", b"x".to_vec(), &PutOptions::new())
        .await
        .unwrap();
    store
        .put(
            "short",
            b"y".to_vec(),
            &PutOptions::new().with_ttl(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    clock.advance(Duration::from_secs(5));
    let progress = store.plan_pass(b"").await.unwrap();
    for (expired, count) in [(false, 1), (true, 2)] {
        let opts = PassOptions::new().with_expired(expired);
        let pages: Vec<_> = store.pass(&progress, &opts).collect().await;
        let n: usize = pages
            .iter()
            .map(|e| match e {
                PassEvent::Page(p) => p.entries.len(),
                PassEvent::Unread { .. } => 0,
            })
            .sum();
        assert_eq!(n, count, "expired {expired}");
    }
}

#[test]
fn progress_text_is_checked() {
    let good = "saltblob-pass 1\nprefix \nin_flight 4\nrange 0a0b pending\nrange 0c done\nrange 0d after a%FFb\n";
    let p = PassProgress::from_text(good).unwrap();
    assert_eq!(p.to_text(), good);
    assert_eq!(
        p.ranges().nth(2).unwrap().1,
        &RangeState::After(Bytes::from_static(b"a\xffb"))
    );
    for (bad, why) in [
        ("", "first line"),
        (
            "saltblob-pass 1\nin_flight 1\nrange ordered pending\n",
            "missing",
        ),
        ("saltblob-pass 1\nprefix \nin_flight 1\n", "at least one"),
        (
            "saltblob-pass 1\nprefix \nin_flight 1\nrange 0g pending\n",
            "not hex",
        ),
        (
            "saltblob-pass 1\nprefix \nin_flight 1\nrange 00 later\n",
            "the state",
        ),
        (
            "saltblob-pass 1\nprefix a\nin_flight 1\nrange 00 done\n",
            "one ordered range",
        ),
        (
            "saltblob-pass 1\nprefix \nin_flight 1\nrange ordered done\nrange 00 done\n",
            "one ordered range",
        ),
        (
            "saltblob-pass 1\nprefix \nin_flight x\nrange 00 done\n",
            "number",
        ),
    ] {
        let e = PassProgress::from_text(bad).unwrap_err().to_string();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
}
