//! The scheduler's mechanism, deterministically: admission order, slots given back, and a store whose backend
//! has injected latency (paused Tokio time) showing small operations admitted while a bulk put is queued.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::*;
use crate::backend::layer::ChunkStoreLayer;
use crate::backend::memory::MemoryStore;
use crate::backend::{
    BlobRef, ChunkId, ChunkStore, ChunkWrite, Namespace, Precondition, RecordWrite,
};
use crate::base::error::Error;
use crate::base::units::MIB;
use crate::format::layout::LayoutPolicy;
use crate::state::config::{GetOptions, PutOptions, StoreConfig};
use crate::store::BlobStore;

fn scheduler(limit: usize) -> Arc<Scheduler> {
    Arc::new(Scheduler::new(
        SchedulerConfig::default().with_limits(limit, limit, limit),
    ))
}

fn id(s: &Scheduler, name: &str) -> usize {
    s.tag(&PriorityClass::new(name).expect("name"))
        .expect("known")
        .id
}

/// Lets every spawned task run until it blocks.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// With the limit reached by bulk units, an interactive request is admitted at once, ahead of the five bulk
/// units queued before it, which are then admitted in order as slots free: bulk is served, not starved.
#[tokio::test(flavor = "current_thread")]
async fn interactive_is_admitted_ahead_of_queued_bulk_units() {
    let s = scheduler(1);
    let (interactive, bulk) = (id(&s, INTERACTIVE), id(&s, BULK));
    let held = s.admit(bulk, 256 << 10).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut queue = |class: usize, name: String| {
        let (s, order) = (Arc::clone(&s), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let _permit = s.admit(class, 256 << 10).await;
            order.lock().expect("order").push(name);
            tokio::task::yield_now().await;
        }));
    };
    for unit in 0..5 {
        queue(bulk, format!("bulk {unit}"));
    }
    settle().await;
    assert_eq!(s.stats().classes[0].queued, 5, "bulk waits for the limit");
    queue(interactive, "small".into());
    settle().await;
    assert_eq!(*order.lock().expect("order"), ["small"]);
    drop(held);
    for task in tasks {
        task.await.expect("task");
    }
    let order = order.lock().expect("order").clone();
    assert_eq!(
        order,
        ["small", "bulk 0", "bulk 1", "bulk 2", "bulk 3", "bulk 4"]
    );
    let stats = s.stats();
    assert_eq!(stats.inflight, 0);
    assert_eq!(
        (stats.classes[0].admitted, stats.classes[1].admitted),
        (6, 1)
    );
}

/// Small requests holding every slot they may hold do not starve bulk: a bulk request starts at once.
#[tokio::test(flavor = "current_thread")]
async fn bulk_is_never_starved() {
    let s = scheduler(2);
    let (interactive, bulk) = (id(&s, INTERACTIVE), id(&s, BULK));
    let _small = [s.admit(interactive, 1).await, s.admit(interactive, 1).await];
    let third = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { drop(s.admit(interactive, 1).await) })
    };
    settle().await;
    assert_eq!(
        s.stats().classes[1].queued,
        1,
        "a third small request waits"
    );
    let first_bulk = tokio::time::timeout(Duration::from_secs(5), s.admit(bulk, 1)).await;
    assert!(first_bulk.is_ok(), "bulk with nothing in flight starts");
    third.abort();
}

/// Small requests slowed far past their baseline, long enough to bring the limit to its minimum.
fn slow_small_requests(s: &Scheduler) {
    let interactive = id(s, INTERACTIVE);
    let mut state = s.lock();
    state.limit.sample(interactive, 0.002, 1);
    for _ in 0..200 {
        state.limit.sample(interactive, 0.050, 1);
    }
}

/// When was the next bulk request admitted, after one that took 100 ms, once small requests were slow: the
/// pause after a bulk request, measured on Tokio's (paused) clock. Small and record requests start during it.
async fn pause_after_a_bulk_request(min_duty: f64) -> Duration {
    let s = Arc::new(Scheduler::new(
        SchedulerConfig::default()
            .with_limits(1, 1, 8)
            .with_min_bulk_duty(min_duty),
    ));
    let (interactive, bulk) = (id(&s, INTERACTIVE), id(&s, BULK));
    slow_small_requests(&s);
    let unit = s.admit(bulk, 1).await;
    tokio::time::advance(Duration::from_millis(100)).await;
    drop(unit);
    let done = Instant::now();
    let next = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            let _unit = s.admit(bulk, 1).await;
            Instant::now()
        })
    };
    let small = s.admit(interactive, 1).await;
    assert_eq!(Instant::now(), done, "a small request starts at once");
    drop(small);
    drop(s.admit_record(bulk, 1).await);
    assert_eq!(Instant::now(), done, "so does a record request of bulk");
    let admitted = next.await.expect("the next bulk request ran");
    admitted - done
}

/// At the minimum limit with small requests still slow, bulk pauses after each request for its time x (1 ÷
/// duty − 1): 300 ms after a 100 ms request at the floor of 0.25. With the default floor (1.0) it never
/// pauses.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn below_the_minimum_bulk_pauses_between_its_requests() {
    let paused = pause_after_a_bulk_request(0.25).await;
    assert_eq!(paused, Duration::from_millis(300));
    let s = Scheduler::new(SchedulerConfig::default().with_min_bulk_duty(0.25));
    slow_small_requests(&s);
    assert_eq!(s.stats().duty, 0.25, "the stats show the duty");
    assert_eq!(pause_after_a_bulk_request(1.0).await, Duration::ZERO);
}

/// A pause whose runtime shuts down before it ends gives its slot back: the store outlives the runtime.
#[test]
fn a_pause_cut_short_by_its_runtime_gives_the_slot_back() {
    let s = Arc::new(Scheduler::new(
        SchedulerConfig::default().with_limits(1, 1, 8),
    ));
    slow_small_requests(&s);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let unit = s.admit(id(&s, BULK), 1).await;
        std::thread::sleep(Duration::from_millis(20));
        drop(unit);
    });
    assert_eq!(s.stats().inflight, 1, "the slot is kept through the pause");
    drop(runtime);
    assert_eq!(s.stats().inflight, 0);
}

/// Bulk requests in flight stop at the limit; small requests start at once however many bulk ones run, up to
/// the maximum of their own.
#[tokio::test(flavor = "current_thread")]
async fn the_limit_holds_back_bulk_not_small_requests() {
    let s = Arc::new(Scheduler::new(
        SchedulerConfig::default().with_limits(4, 4, 6),
    ));
    let (interactive, bulk) = (id(&s, INTERACTIVE), id(&s, BULK));
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(s.admit(bulk, 1).await);
    }
    let fifth = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { drop(s.admit(bulk, 1).await) })
    };
    settle().await;
    assert_eq!(s.stats().classes[0].queued, 1, "the fifth bulk unit waits");
    for _ in 0..6 {
        let small = tokio::time::timeout(Duration::from_secs(5), s.admit(interactive, 1)).await;
        held.push(small.expect("a small request starts at once"));
    }
    let seventh = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { drop(s.admit(interactive, 1).await) })
    };
    settle().await;
    assert_eq!(
        s.stats().classes[1].queued,
        1,
        "small requests stop at the maximum"
    );
    assert_eq!(s.stats().inflight, 10);
    held.clear();
    settle().await;
    fifth.await.expect("the fifth bulk unit ran");
    seventh.await.expect("the seventh small request ran");
}

/// A request that gives up while queued leaves the queue; one admitted but never run gives its slot back.
#[tokio::test(flavor = "current_thread")]
async fn abandoned_requests_give_their_slots_back() {
    let s = scheduler(1);
    let bulk = id(&s, BULK);
    let held = s.admit(bulk, 1).await;
    let waiter = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { drop(s.admit(bulk, 1).await) })
    };
    settle().await;
    assert_eq!(s.stats().classes[0].queued, 1);
    waiter.abort();
    settle().await;
    assert_eq!(
        s.stats().classes[0].queued,
        0,
        "the aborted waiter left the queue"
    );

    // Admitted while nobody polls it, then dropped: the slot comes back.
    let pending = {
        let s = Arc::clone(&s);
        async move { s.admit(bulk, 1).await }
    };
    let mut pending = Box::pin(pending);
    assert!(futures::poll!(pending.as_mut()).is_pending());
    drop(held); // admits `pending` without it running
    drop(pending);
    let stats = s.stats();
    assert_eq!((stats.inflight, stats.classes[0].inflight), (0, 0));
    assert!(
        tokio::time::timeout(Duration::from_secs(5), s.admit(bulk, 1))
            .await
            .is_ok()
    );
}

/// A record request of a background class (gc's reads, writes and deletes) is admitted at once, beside the
/// class's units in flight and ahead of those queued, which keep their order; the class's data units still
/// wait for the limit.
#[tokio::test(flavor = "current_thread")]
async fn background_record_requests_do_not_queue_behind_its_units() {
    let s = Arc::new(Scheduler::new(
        SchedulerConfig::default().with_limits(1, 1, 8),
    ));
    let bulk = id(&s, BULK);
    let held = s.admit(bulk, 1 << 20).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut units = Vec::new();
    for unit in 0..3 {
        let (s, order) = (Arc::clone(&s), Arc::clone(&order));
        units.push(tokio::spawn(async move {
            let _permit = s.admit(bulk, 1 << 20).await;
            order.lock().expect("order").push(unit);
        }));
    }
    settle().await;
    assert_eq!(
        s.stats().classes[0].queued,
        3,
        "bulk units wait for the limit"
    );
    let mut records = Vec::new();
    for _ in 0..4 {
        let record = tokio::time::timeout(Duration::from_secs(5), s.admit_record(bulk, 40)).await;
        records.push(record.expect("a record request starts at once"));
    }
    let stats = s.stats();
    assert_eq!((stats.classes[0].queued, stats.classes[0].admitted), (3, 5));
    assert_eq!(stats.classes[0].inflight, 5);
    drop(records);
    drop(held);
    for unit in units {
        unit.await.expect("unit");
    }
    assert_eq!(*order.lock().expect("order"), [0, 1, 2]);
    assert_eq!(s.stats().inflight, 0, "every slot given back");
}

/// A memory backend whose chunk writes and reads take 10 ms (of paused Tokio time), recording the class and size
/// of each call as it starts (a chunk write as `put_chunks`, logged or not).
#[derive(Debug, Default)]
struct Slow {
    inner: MemoryStore,
    calls: Mutex<Vec<(String, &'static str, usize)>>,
    /// `put_chunk_records` calls running now, and the most at once.
    record_calls: Mutex<(usize, usize)>,
}

impl Slow {
    fn record(&self, what: &'static str, bytes: usize) {
        let class = current_class().map_or("none".to_owned(), |c| c.name().to_owned());
        self.calls.lock().expect("calls").push((class, what, bytes));
    }

    /// Records a chunk write, then takes its 10 ms.
    async fn write(&self, chunks: &[ChunkWrite]) {
        self.record("put_chunks", chunks.iter().map(|c| c.data.len()).sum());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[async_trait]
impl ChunkStoreLayer for Slow {
    fn inner(&self) -> &dyn ChunkStore {
        &self.inner
    }
    async fn get_record(
        &self,
        ns: Namespace,
        key: &[u8],
    ) -> crate::base::error::Result<Option<Bytes>> {
        self.record("get_record", 0);
        self.inner.get_record(ns, key).await
    }
    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> crate::base::error::Result<RecordWrite> {
        self.record("put_record", value.len());
        self.inner.put_record(ns, key, value, cond).await
    }
    async fn put_chunks(
        &self,
        blob: &BlobRef,
        chunks: Vec<ChunkWrite>,
    ) -> crate::base::error::Result<()> {
        self.write(&chunks).await;
        self.inner.put_chunks(blob, chunks).await
    }
    async fn put_chunks_unlogged(
        &self,
        blob: &BlobRef,
        chunks: Vec<ChunkWrite>,
    ) -> crate::base::error::Result<()> {
        self.write(&chunks).await;
        self.inner.put_chunks_unlogged(blob, chunks).await
    }
    async fn put_chunk_records(
        &self,
        blob: &BlobRef,
        records: Vec<crate::backend::ChunkRecord>,
    ) -> crate::base::error::Result<()> {
        self.record("put_chunks", records.iter().map(|r| r.len()).sum());
        {
            let mut calls = self.record_calls.lock().expect("record calls");
            calls.0 += 1;
            calls.1 = calls.1.max(calls.0);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.record_calls.lock().expect("record calls").0 -= 1;
        self.inner.put_chunk_records(blob, records).await
    }
    async fn get_chunks(
        &self,
        blob: &BlobRef,
        chunks: &[ChunkId],
    ) -> crate::base::error::Result<Vec<Option<Bytes>>> {
        self.record("get_chunks", chunks.len());
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.inner.get_chunks(blob, chunks).await
    }
}

fn slow_store(limit: usize) -> (Arc<Slow>, BlobStore) {
    let backend = Arc::new(Slow::default());
    let config = StoreConfig::default()
        .with_policy(LayoutPolicy::default().with_fanout_threshold(MIB))
        .with_scheduler(SchedulerConfig::default().with_limits(limit, limit, limit));
    let store = BlobStore::new(backend.clone(), config).expect("store");
    (backend, store)
}

/// A 16 MiB salted put runs in `bulk`, cut into 256 KiB units; small puts and gets started while it is under
/// way run in `interactive` and are each admitted within a few bulk units, not after the whole put; the
/// bulk put still completes, and reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_operations_overtake_a_queued_bulk_put() {
    let (backend, store) = slow_store(2);
    store
        .put("small", vec![1u8; 100 << 10], &PutOptions::new())
        .await
        .expect("small put");
    backend.calls.lock().expect("calls").clear();
    let big = vec![7u8; 16 << 20];
    let bulk = {
        let (store, big) = (store.clone(), big.clone());
        tokio::spawn(async move { store.put("big", big, &PutOptions::new()).await })
    };
    // Let the bulk put queue most of its units.
    while backend
        .calls
        .lock()
        .expect("calls")
        .iter()
        .filter(|c| c.1 == "put_chunks")
        .count()
        < 4
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for i in 0..5 {
        let got = store.get("small").await.expect("small get");
        assert_eq!(got.len(), 100 << 10);
        store
            .put(format!("s{i}"), vec![2u8; 100 << 10], &PutOptions::new())
            .await
            .expect("small put");
    }
    let small_done = backend.calls.lock().expect("calls").len();
    bulk.await.expect("task").expect("bulk put");
    assert_eq!(store.get("big").await.expect("big get"), big);

    let calls = backend.calls.lock().expect("calls").clone();
    let chunk_writes: Vec<_> = calls.iter().filter(|c| c.1 == "put_chunks").collect();
    let bulk_writes = chunk_writes.iter().filter(|c| c.0 == BULK).count();
    assert_eq!(
        bulk_writes, 64,
        "16 MiB in units of 4 chunks of 64 KiB: {chunk_writes:?}"
    );
    assert!(
        chunk_writes
            .iter()
            .filter(|c| c.0 == BULK)
            .all(|c| c.2 <= (256 << 10) + 4 * 64),
        "every bulk unit is at most 256 KiB of chunks"
    );
    let small_calls: Vec<_> = calls[..small_done]
        .iter()
        .filter(|c| c.0 == INTERACTIVE)
        .collect();
    assert!(
        small_calls.len() >= 10,
        "the small operations ran as interactive: {small_calls:?}"
    );
    let bulk_before_small_done = calls[..small_done]
        .iter()
        .filter(|c| c.0 == BULK && c.1 == "put_chunks")
        .count();
    assert!(
        bulk_before_small_done < bulk_writes / 2,
        "ten small operations finished within {bulk_before_small_done} of {bulk_writes} bulk units"
    );
    let stats = store.scheduler_stats();
    let bulk_stats = stats.classes.iter().find(|c| c.name == BULK).expect("bulk");
    assert!(
        bulk_stats.bytes >= 32 << 20,
        "wrote and read 16 MiB: {bulk_stats:?}"
    );
}

/// A put of chunk records (a file of its version's own, whose writer takes one call at a time) keeps at most
/// `RECORD_CALLS_IN_FLIGHT` calls of them waiting or running, though its window would allow 64 (16 MiB of
/// 256 KiB units) and the limit as many: more would only hold the class's slots, and every request of the class
/// (gc's) would queue behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_of_chunk_records_keeps_few_calls_in_flight() {
    use crate::backend::RECORD_CALLS_IN_FLIGHT;
    use crate::backend::memory::MEMORY_RECORDS_MIN_BYTES;

    let (backend, store) = slow_store(64);
    let size = usize::try_from(MEMORY_RECORDS_MIN_BYTES).expect("fits") + (4 << 20);
    let value = vec![5u8; size];
    store
        .put("big", value.clone(), &PutOptions::new())
        .await
        .expect("put");
    let (running, most) = *backend.record_calls.lock().expect("record calls");
    let calls = backend.calls.lock().expect("calls").len();
    assert_eq!(running, 0);
    assert!(
        (1..=RECORD_CALLS_IN_FLIGHT).contains(&most),
        "{most} record calls at once (of {calls} calls)"
    );
    assert_eq!(store.get("big").await.expect("get"), value);
}

/// The class follows the layout, an operation's own class wins, and the store's default class applies to
/// operations that name none.
#[tokio::test(flavor = "current_thread")]
async fn the_class_follows_the_layout_unless_named() {
    let (backend, store) = slow_store(4);
    let classes = |backend: &Slow| -> Vec<String> {
        let mut calls = backend.calls.lock().expect("calls");
        let classes = calls.iter().map(|c| c.0.clone()).collect();
        calls.clear();
        classes
    };
    store
        .put("inline", &b"tiny"[..], &PutOptions::new())
        .await
        .expect("put");
    store
        .put("one", vec![0u8; 512 << 10], &PutOptions::new())
        .await
        .expect("put");
    // Outside any operation's class (a head), the backend sees the fallback class.
    store.head("one").await.expect("head");
    let small = classes(&backend);
    assert!(small.iter().all(|c| c == INTERACTIVE), "{small:?}");
    store
        .put("fan", vec![0u8; 2 << 20], &PutOptions::new())
        .await
        .expect("put");
    store.get("fan").await.expect("get");
    let fan = classes(&backend);
    assert!(fan.iter().filter(|c| *c == BULK).count() >= 8, "{fan:?}");
    store
        .put(
            "fan",
            vec![0u8; 2 << 20],
            &PutOptions::new().with_priority(PriorityClass::interactive()),
        )
        .await
        .expect("put");
    assert!(classes(&backend).iter().all(|c| c == INTERACTIVE));
    store
        .get_with(
            "one",
            &GetOptions::new().with_priority(PriorityClass::bulk()),
        )
        .await
        .expect("get");
    assert!(classes(&backend).iter().all(|c| c == BULK));

    let config = StoreConfig::default().with_scheduler(
        SchedulerConfig::default()
            .with_class("batch", 10)
            .with_default_class(PriorityClass::new("batch").expect("name")),
    );
    let batch = BlobStore::new(backend.clone(), config).expect("store");
    batch
        .put("inline", &b"tiny"[..], &PutOptions::new())
        .await
        .expect("put");
    batch.get("one").await.expect("get");
    batch.head("one").await.expect("head");
    let batched = classes(&backend);
    assert!(batched.iter().all(|c| c == "batch"), "{batched:?}");
}

/// An unknown class fails before any I/O, naming the option; a bad scheduler configuration fails when the
/// store is built.
#[tokio::test(flavor = "current_thread")]
async fn unknown_classes_fail_before_any_io() {
    let (backend, store) = slow_store(4);
    let nope = PriorityClass::new("nope").expect("well-formed name");
    let mut reader = &b"some bytes that must stay unread"[..];
    let errors = [
        store
            .put(
                "k",
                &b"v"[..],
                &PutOptions::new().with_priority(nope.clone()),
            )
            .await
            .map(|_| ()),
        store
            .put_stream(
                "k",
                &mut reader,
                &PutOptions::new().with_priority(nope.clone()),
            )
            .await
            .map(|_| ()),
        store
            .get_with("k", &GetOptions::new().with_priority(nope.clone()))
            .await
            .map(|_| ()),
    ];
    for e in errors {
        match e {
            Err(Error::InvalidArgument { what, reason }) => {
                assert_eq!(what, "priority");
                assert!(reason.contains("unknown class \"nope\""), "{reason}");
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    assert_eq!(reader.len(), 32, "the stream was not read");
    assert!(backend.calls.lock().expect("calls").is_empty(), "no I/O");
    let bad =
        StoreConfig::default().with_scheduler(SchedulerConfig::default().with_class("bulk", 0));
    match BlobStore::new(backend, bad) {
        Err(Error::InvalidArgument { what, .. }) => assert_eq!(what, "classes"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// With scheduling off, requests carry no class and bulk work is not cut into units.
#[tokio::test(flavor = "current_thread")]
async fn scheduling_off_is_the_plain_backend() {
    let backend = Arc::new(Slow::default());
    let config = StoreConfig::default()
        .with_policy(LayoutPolicy::default().with_fanout_threshold(MIB))
        .with_scheduler(SchedulerConfig::off());
    let store = BlobStore::new(backend.clone(), config).expect("store");
    store
        .put("fan", vec![0u8; 4 << 20], &PutOptions::new())
        .await
        .expect("put");
    let calls = backend.calls.lock().expect("calls").clone();
    assert!(calls.iter().all(|c| c.0 == "none"));
    assert_eq!(
        calls.iter().filter(|c| c.1 == "put_chunks").count(),
        4,
        "1 MiB batches"
    );
    assert!(!store.scheduler_stats().enabled);
}
