//! Passes over the whole store ([`crate::store::BlobStore::pass`]): by the backend's ranges, every manifest once,
//! keys that are not UTF-8 included; interrupted and resumed from the progress as text, no key handled twice; a
//! range that cannot be read reported unread, and read when the pass resumes. Other cases share the backend, so
//! only the keys of this case's prefix are counted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use super::{data, prefix, small_config, store};
use crate::backend::layer::ChunkStoreLayer;
use crate::backend::{ChunkStore, Namespace, RangePage, ScanRange};
use crate::base::error::{Error, Result};
use crate::state::config::PutOptions;
use crate::store::BlobStore;
use crate::store::pass::{PassEvent, PassOptions, PassProgress};

/// Puts blobs of every layout under `p`, two of them with keys that are not UTF-8; returns their keys, sorted.
async fn fill(store: &BlobStore, p: &str) -> Vec<Bytes> {
    let mut keys = Vec::new();
    for i in 0..40u64 {
        let key = Bytes::from(format!("{p}{i:02}"));
        let size = match i % 10 {
            0 => 70_000,
            1 => 9_000,
            _ => 100,
        };
        store
            .put(key.clone(), data(size, i), &PutOptions::new())
            .await
            .expect("put");
        keys.push(key);
    }
    for tail in [&b"\xff\xfe\x00"[..], b"\xc3\x28/x"] {
        let mut key = p.as_bytes().to_vec();
        key.extend_from_slice(tail);
        let key = Bytes::from(key);
        store
            .put(key.clone(), data(10, 7), &PutOptions::new())
            .await
            .expect("put of a key that is not UTF-8");
        keys.push(key);
    }
    keys.sort();
    keys
}

/// What one run of a pass saw of the keys under `p`: (range, key) in the order handled, and the ranges reported
/// unread. Every entry is recorded as handled; the run stops after `stop_after` entries of any key.
async fn run(
    store: &BlobStore,
    progress: &mut PassProgress,
    p: &str,
    stop_after: Option<usize>,
) -> (Vec<(usize, Bytes)>, Vec<usize>) {
    let mut seen = Vec::new();
    let mut handled = 0;
    let mut unread = Vec::new();
    let mut events = store.pass(progress, &PassOptions::new());
    'pass: while let Some(event) = events.next().await {
        match event {
            PassEvent::Page(page) => {
                for entry in &page.entries {
                    if stop_after.is_some_and(|n| handled >= n) {
                        break 'pass;
                    }
                    handled += 1;
                    if entry.key.starts_with(p.as_bytes()) {
                        let m = entry.manifest.as_ref().expect("a manifest that decodes");
                        assert!(m.size > 0);
                        seen.push((page.range, entry.key.clone()));
                    }
                    progress.record_key(page.range, &entry.key);
                }
                progress.record_page(&page);
            }
            PassEvent::Unread { range, error } => {
                assert!(
                    error.to_string().contains("injected"),
                    "range {range}: {error}"
                );
                unread.push(range);
            }
        }
    }
    (seen, unread)
}

fn keys_of(seen: &[(usize, Bytes)]) -> Vec<Bytes> {
    let mut keys: Vec<Bytes> = seen.iter().map(|(_, k)| k.clone()).collect();
    keys.sort();
    keys
}

pub async fn a_pass_reads_every_manifest_once_and_resumes(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("pass");
    let keys = fill(&store, &p).await;

    let mut whole = store.plan_pass(b"").await.expect("plan");
    let (seen, unread) = run(&store, &mut whole, &p, None).await;
    assert!(unread.is_empty(), "{unread:?}");
    assert_eq!(keys_of(&seen), keys, "every key once");
    assert!(whole.is_complete());

    // Interrupted twice (after a handful of entries, the store's others included) and resumed from its text.
    let mut progress = store.plan_pass(b"").await.expect("plan");
    let mut handled = Vec::new();
    for stop in [3, 11] {
        let (seen, _) = run(&store, &mut progress, &p, Some(stop)).await;
        handled.extend(seen);
        progress = PassProgress::from_text(&progress.to_text()).expect("progress read back");
    }
    let (rest, unread) = run(&store, &mut progress, &p, None).await;
    assert!(unread.is_empty(), "{unread:?}");
    handled.extend(rest);
    assert_eq!(
        keys_of(&handled),
        keys,
        "every key handled once over three runs"
    );
    assert!(progress.is_complete());

    // Under a prefix: one range, in key order.
    let mut under = store.plan_pass(p.as_bytes()).await.expect("plan");
    assert!(under.is_ordered());
    let (seen, _) = run(&store, &mut under, &p, None).await;
    let in_order: Vec<Bytes> = seen.into_iter().map(|(_, k)| k).collect();
    assert_eq!(in_order, keys);
}

/// A backend whose reads of one range of the manifests fail (not retryable): through
/// [`ChunkStore::scan_manifest_range`], or through [`ChunkStore::scan_records`] of the manifests when that range
/// is [`ScanRange::ordered`].
#[derive(Debug)]
struct FailingRange {
    inner: Arc<dyn ChunkStore>,
    failing: Mutex<Option<ScanRange>>,
}

impl FailingRange {
    fn check(&self, range: &ScanRange) -> Result<()> {
        if self.failing.lock().expect("lock").as_ref() == Some(range) {
            return Err(Error::backend(
                "failing-range",
                "injected failure of a range",
                false,
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl ChunkStoreLayer for FailingRange {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    async fn scan_records(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        if ns == Namespace::Manifest && prefix.is_empty() {
            self.check(&ScanRange::ordered())?;
        }
        self.inner
            .scan_records(ns, prefix, start_after, limit)
            .await
    }

    async fn scan_manifest_range(
        &self,
        range: &ScanRange,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<RangePage> {
        self.check(range)?;
        self.inner.scan_manifest_range(range, after, limit).await
    }
}

pub async fn a_range_that_cannot_be_read_is_reported_and_read_on_resume(
    backend: Arc<dyn ChunkStore>,
) {
    let layer = Arc::new(FailingRange {
        inner: backend,
        failing: Mutex::new(None),
    });
    let as_backend: Arc<dyn ChunkStore> = layer.clone();
    let store = store(&as_backend, small_config());
    let p = prefix("pass-fault");
    let keys = fill(&store, &p).await;

    // Which range holds which of this case's keys.
    let mut first = store.plan_pass(b"").await.expect("plan");
    let (seen, _) = run(&store, &mut first, &p, None).await;
    let mut by_range: BTreeMap<usize, Vec<Bytes>> = BTreeMap::new();
    for (range, key) in seen {
        by_range.entry(range).or_default().push(key);
    }
    let (&lost_range, _) = by_range
        .iter()
        .max_by_key(|(_, keys)| keys.len())
        .expect("a range with keys");
    let descriptor = first
        .ranges()
        .nth(lost_range)
        .map(|(r, _)| r.clone())
        .expect("the range");
    *layer.failing.lock().expect("lock") = Some(descriptor);

    let mut progress = store.plan_pass(b"").await.expect("plan");
    let (seen, unread) = run(&store, &mut progress, &p, None).await;
    assert_eq!(unread, [lost_range], "the range is named, not skipped");
    let lost = by_range.remove(&lost_range).unwrap_or_default();
    let read: Vec<Bytes> = by_range.into_values().flatten().collect();
    let mut read_sorted = read.clone();
    read_sorted.sort();
    assert_eq!(
        keys_of(&seen),
        read_sorted,
        "the other ranges were read whole"
    );
    assert!(!progress.is_complete());
    assert_eq!(progress.ranges_done(), progress.range_count() - 1);
    let census = store.census(b"", None, |_| {}).await;
    assert!(
        census.is_err_and(|e| e.to_string().contains("unread")),
        "a census that cannot read a range fails"
    );

    *layer.failing.lock().expect("lock") = None;
    let (rest, unread) = run(&store, &mut progress, &p, None).await;
    assert!(unread.is_empty(), "{unread:?}");
    let mut lost_sorted = lost;
    lost_sorted.sort();
    assert_eq!(
        keys_of(&rest),
        lost_sorted,
        "the resumed pass reads that range"
    );
    assert!(progress.is_complete());
    assert_eq!(read.len() + rest.len(), keys.len());
}
