//! Passes over the whole store by token ranges ([`saltblob_core::ChunkStore::manifest_ranges`]), each in a
//! keyspace of its own so that every key the pass reads is one the test put: the ranges hold every key once; a
//! range read a few rows at a time (after a key, within a page) reads what one read of it does; a pass
//! interrupted again and again and resumed from its progress as text reads every key exactly once, keys that
//! are not UTF-8 included. And how fast a pass reads, one range at a time and as planned (`TEST_CQL_PASS_N`
//! blobs, 2,000 unless told).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt, stream};
use saltblob_core::conformance::{data, small_config};
use saltblob_core::{
    BlobStore, ChunkStore, PassEvent, PassOptions, PassProgress, PutOptions, RangeState,
};

use crate::{connect_to, keyspace};

/// A store on keyspace `name` (the shared one's name, then `name`), with `n` small blobs, every seventh key not
/// UTF-8; returns the store and its keys, sorted.
async fn filled(name: &str, n: usize) -> (BlobStore, Vec<Bytes>) {
    let ks = format!("{}_{name}", keyspace());
    let backend: Arc<dyn ChunkStore> = Arc::new(connect_to(&ks, "").await);
    let store = BlobStore::new(backend, small_config()).expect("store");
    let mut keys: Vec<Bytes> = (0..n)
        .map(|i| {
            let mut key = format!("k{i:07}").into_bytes();
            if i % 7 == 3 {
                key.extend_from_slice(b"\xff\xfe\x00\xc3\x28");
            }
            Bytes::from(key)
        })
        .collect();
    stream::iter(keys.clone())
        .map(|key| {
            let store = &store;
            async move {
                let seed = u64::from(key[key.len() - 1]);
                store.put(key, data(100, seed), &PutOptions::new()).await
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await
        .expect("puts");
    keys.sort();
    (store, keys)
}

/// What one [`run`] of a pass handled.
struct Run {
    /// The keys handled, in order.
    handled: Vec<Bytes>,
    /// Whether the run stopped inside a page (some of its entries handled, some not); a stop that falls on a
    /// page's end leaves no range half read.
    mid_page: bool,
}

/// Runs a pass from `progress`, recording each key as handled, until `stop_after` keys were handled (then the
/// pass is dropped, mid-page unless the count fell on a page's end).
async fn run(
    store: &BlobStore,
    progress: &mut PassProgress,
    opts: &PassOptions,
    stop_after: Option<usize>,
) -> Run {
    let mut handled = Vec::new();
    let mut mid_page = false;
    let mut events = store.pass(progress, opts);
    'pass: while let Some(event) = events.next().await {
        match event {
            PassEvent::Page(page) => {
                for (i, entry) in page.entries.iter().enumerate() {
                    if stop_after.is_some_and(|n| handled.len() >= n) {
                        mid_page = i > 0;
                        break 'pass;
                    }
                    assert!(entry.manifest.is_ok(), "{:?}", entry.key);
                    handled.push(entry.key.clone());
                    progress.record_key(page.range, &entry.key);
                }
                progress.record_page(&page);
            }
            PassEvent::Unread { range, error } => panic!("range {range} unread: {error}"),
        }
    }
    Run { handled, mid_page }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn token_ranges_hold_every_key_once_and_read_alike_in_small_pages() {
    let (store, keys) = filled("ranges", 600).await;
    let backend = store.backend();
    let plan = backend.manifest_ranges().await.expect("plan");
    assert!(plan.ranges.len() > 1, "one node's ring is several ranges");
    assert!(plan.in_flight > 1 && plan.in_flight <= plan.ranges.len());

    let mut owner: BTreeMap<Bytes, usize> = BTreeMap::new();
    for (i, range) in plan.ranges.iter().enumerate() {
        let whole = backend
            .scan_manifest_range(range, None, 100_000)
            .await
            .expect("range read");
        assert!(whole.done);
        for (key, value) in &whole.records {
            assert!(!value.is_empty());
            if let Some(other) = owner.insert(key.clone(), i) {
                panic!("{key:?} in ranges {other} and {i}");
            }
        }
        // Read again 1, then 3, then 2 rows at a time, each read after the last key of the one before.
        let mut paged = Vec::new();
        let mut after: Option<Bytes> = None;
        for limit in [1, 3, 2].into_iter().cycle() {
            let page = backend
                .scan_manifest_range(range, after.as_deref(), limit)
                .await
                .expect("range page");
            assert!(page.records.len() <= limit);
            after = page.records.last().map(|(k, _)| k.clone()).or(after);
            paged.extend(page.records);
            if page.done {
                break;
            }
        }
        assert_eq!(paged, whole.records, "range {i} read in small pages");
    }
    let seen: Vec<Bytes> = owner.into_keys().collect();
    assert_eq!(seen, keys, "the ranges hold every key, each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn an_interrupted_pass_resumed_from_its_text_reads_every_key_exactly_once() {
    let (store, keys) = filled("resume", 1500).await;
    let mut progress = store.plan_pass(b"").await.expect("plan");
    let opts = PassOptions::new();
    let mut handled = Vec::new();
    let mut mid_page_stops = 0;
    // Stops mid-page (pages are 1,000 rows, several ranges at once), the text read back after each. A count
    // that falls on a page's end (a whole range, when ranges are smaller than a page) stops between ranges.
    for stop in [1, 37, 250, 5, 600] {
        let run = run(&store, &mut progress, &opts, Some(stop)).await;
        assert_eq!(run.handled.len(), stop, "the run stopped where told");
        handled.extend(run.handled);
        progress = PassProgress::from_text(&progress.to_text()).expect("progress read back");
        assert!(!progress.is_complete());
        if run.mid_page {
            mid_page_stops += 1;
            assert!(
                progress
                    .ranges()
                    .any(|(_, s)| matches!(s, RangeState::After(_))),
                "a stop inside a page leaves its range read up to a key"
            );
        }
    }
    assert!(
        mid_page_stops >= 3,
        "{mid_page_stops} of 5 stops fell inside a page"
    );
    handled.extend(run(&store, &mut progress, &opts, None).await.handled);
    assert!(progress.is_complete());
    assert_eq!(handled.len(), keys.len(), "no key handled twice");
    handled.sort();
    assert_eq!(handled, keys, "every key handled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn a_pass_reads_the_same_rows_one_range_at_a_time_and_as_planned() {
    let n = std::env::var("TEST_CQL_PASS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let started = Instant::now();
    let (store, keys) = filled("rate", n).await;
    println!(
        "pass rate: {n} blobs put in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let plan = store.plan_pass(b"").await.expect("plan");
    let planned = PassOptions::new();
    let serial = PassOptions::new().with_in_flight(1);
    for (name, opts) in [
        ("serial", &serial),
        ("planned", &planned),
        ("serial", &serial),
    ] {
        let mut progress = plan.clone();
        let started = Instant::now();
        let mut handled = run(&store, &mut progress, opts, None).await.handled;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "pass rate: {name} (in flight {}): {} rows in {secs:.2} s, {:.0} rows/s, {} ranges",
            opts.in_flight
                .map_or_else(|| "as planned".to_owned(), |n| n.to_string()),
            handled.len(),
            handled.len() as f64 / secs,
            plan.range_count(),
        );
        handled.sort();
        assert_eq!(handled, keys, "{name}");
    }
    let started = Instant::now();
    let census = store.census(b"", None, |_| {}).await.expect("census");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "pass rate: census: {} blobs in {secs:.2} s, {:.0} rows/s",
        census.total().count,
        census.total().count as f64 / secs
    );
    assert_eq!(census.total().count, keys.len() as u64);
}
