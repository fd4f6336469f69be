//! Multipart uploads through the real S3 server, checked by the history checker (`saltblob-check`): nothing a
//! client saw committed is lost, torn, mixed with another upload's bytes, or read after it was certainly
//! replaced.
//!
//! Run: `cargo test --release --locked -p saltblob-server --test integration multipart_history` (about 20 s;
//! the Cassandra variant with `TEST_CQL=host:port ... -- --include-ignored`). The explicit, one-race-per-test
//! checks of the same server paths are in `multipart_races.rs`.
//!
//! # The races
//! On two keys, in rounds, each uploader drives one race per round through a store layer
//! ([`gate::ComposeGate`]) that holds, fails, or makes land late the commit (the manifest write) of a chosen
//! upload's compose: every step of a race waits for the gate (the commit has arrived, the upload record has been
//! read), never for a timer. The races ([`Race`]):
//! - **a held compose**: two Completes, the first held while the second composes again and commits, gc (grace 0)
//!   and a PutObject before the first's commit goes through; two Completes held together; an Abort (409), a
//!   PutObject and gc while a Complete is held; a Complete held past 5 s (200 at once, its result when there);
//! - **a client that goes away during Complete**: its connection closed while the commit is held, a PutObject
//!   meanwhile, then the commit and the client's retry;
//! - **Abort after a failed Complete**: a commit that fails unwritten (500), an Abort within the window (409),
//!   then after the window (204) and a Complete that finds no upload; a retried Complete instead; a commit that
//!   fails but lands later, before the abort can proceed; and one that lands only after the Abort proceeded and
//!   gc ran (the timing assumption broken on purpose: the core's fence between a compose and a discard,
//!   `docs/guarantees.md`, *Segments*);
//! - **a part uploaded again during Complete**: its upload read the upload `open`, the Complete moves it on and is
//!   held, the part finishes (refused, `NoSuchUpload`), gc runs, then the commit; and a part uploaded again
//!   before a Complete that lists the old ETags (`InvalidPart`).
//!
//! Meanwhile a reader per key does GetObject (whole, and ranged: the first bytes, the last ones, across the
//! end of the first part) at random moments: what it sees is checked too, but no race depends on it. Every
//! round ends the same way: the store's clock jumps past the commit window, uploads left `completing` are
//! aborted, gc runs with grace 0, and each key is read whole and across the first part's end. At the end each
//! key's last write is a completed upload; the clock jumps an hour, gc runs twice, and every key is read again:
//! a committed object that is gone shows as *lost*, one whose chunks were reclaimed as *corrupt*. gc with
//! grace 0 runs only while no read is in flight (a shared lock: the grace period protects readers, not data).
//!
//! Not raced: gc (grace 0) *after* the PutObject that replaces the second Complete's object and before the
//! first's held commit lands. The first commit then names chunks gc reclaimed with the replaced version, and
//! the object reads corrupt: a store whose gc grace is shorter than a compose's commit window (three quarters
//! of the intent lease) is not protected against two composes of the same parts (see the report of this test's
//! author; `docs/guarantees.md` does not claim it).
//!
//! # Values
//! Every PutObject writes, and every upload composes, a self-describing value of `saltblob_check::value` (key,
//! writer, sequence number in its header; a body regenerable from them). An upload's parts are the slices of
//! one value (a *generation*); a part uploaded again is a slice of another value, so an object composed of
//! parts of two generations reads as *torn*, at whichever offset they meet. A whole read must also carry the
//! ETag of the value it identified; a ranged read is identified by its ETag among the values written to the
//! key and must equal that value's bytes at that range (else *torn*), and is then recorded as a read of it.
//!
//! # From S3 answers to outcomes
//! - PutObject 200, DeleteObject 204: **ok**. A CompleteMultipartUpload whose body is its result (200, also
//!   after the whitespace of a complete kept alive): **ok**, as a put of the value of the parts it listed, and
//!   its ETag must be theirs.
//! - A refusal (any other 4xx, e.g. `InvalidPart`, `NoSuchUpload`, `OperationAborted`): **failed** — it may have
//!   taken effect before its answer, not after (the server answers so only when it knows no commit of this
//!   request may still land).
//! - A 5xx, an error in the body of a 200 (`InternalError` of a kept-alive complete), or no answer (the client
//!   went away, the connection was cut): **indeterminate** (no completion) — it may take effect at any later
//!   time, as a commit whose outcome the server could not tell may land later.
//! - Every CompleteMultipartUpload of an upload is recorded as invoked when the upload's *first* one was: a
//!   repeated complete answers 200 for the commit of an earlier one. Several completes listing the same parts
//!   are several puts of one value; the checker accepts a read of it if any of them may have written it.
//! - GetObject 200: the value read (or *torn*); `NoSuchKey`: not found; 503: failed; 500 or a body cut short:
//!   failed as **corrupt** — the layer never fails a read, gc never reclaims under a read (the lock above), and
//!   the server answers 500 only for a store error that is not retryable. A range past the end (416) is a
//!   failed read that says nothing.
//! - AbortMultipartUpload and UploadPart are not operations on an object's value: their effect shows in what
//!   the reads find. Their answers are counted, and the test checks that each race happened (a 409 abort, a
//!   204 one, a refused part, completes of each outcome), that fsck finds no damage and no upload is left.
//!
//! Checked failing: with `discard_segment` ending a segment's lease at once (the compose's claim ignored), the
//! commit that lands after the abort reads *corrupt* (`status 200, body cut`).

mod actor;
mod gate;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use saltblob::{
    BlobStore, ChunkStore, FsckOptions, GcOptions, MemoryStore, OffsetClock, StoreConfig,
};
use saltblob_check::{Report, check, context, describe_op};
use tokio::sync::mpsc;

use self::actor::{Actor, BUCKET, PART, Shared, Upload, Value};
use self::gate::ComposeGate;
use crate::TestServer;
use crate::multipart::MIB;

/// The hot keys.
const KEYS: [&str; 2] = ["hot-0", "hot-1"];

/// The sizes of PutObject values: empty, shorter than a value's header, inline, chunked, as large as an
/// upload's.
const PUT_SIZES: [usize; 5] = [0, 20, 1000, 300_000, PART + 1000];
/// The sizes of an upload's last part.
const LAST_PART_SIZES: [usize; 4] = [1, 1000, 100_000, 300_000];

/// A small deterministic generator (splitmix64), seeded per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }

    async fn pause(&mut self, min_ms: u64, max_ms: u64) {
        let ms = min_ms + self.next() % (max_ms - min_ms + 1);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Which backend the store runs on.
pub(crate) enum Backend {
    Memory,
    Rocks,
    /// A new keyspace on the cluster at `TEST_CQL`.
    Cql,
}

/// The server, over a [`ComposeGate`] on the backend, with a clock the test moves.
pub(crate) struct Rig {
    server: TestServer,
    gate: Arc<ComposeGate>,
    clock: Arc<OffsetClock>,
    shared: Arc<Shared>,
    _dir: Option<tempfile::TempDir>,
}

impl Rig {
    /// A rig on `backend`, the gate wrapping `layer` (applied to the backend first: the broken variants).
    pub(crate) async fn new(
        backend: Backend,
        layer: impl FnOnce(Arc<dyn ChunkStore>) -> Arc<dyn ChunkStore>,
    ) -> Self {
        let (raw, dir): (Arc<dyn ChunkStore>, _) = match backend {
            Backend::Memory => (Arc::new(MemoryStore::new()), None),
            Backend::Rocks => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("rocksdb://{}", dir.path().display());
                (
                    saltblob::open_backend(&url).await.expect("rocksdb"),
                    Some(dir),
                )
            }
            Backend::Cql => {
                let host = std::env::var("TEST_CQL")
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .expect(
                        "this test needs a cluster: set TEST_CQL=host:port (e.g. 127.0.0.1:9042)",
                    );
                let keyspace = format!(
                    "saltblob_mphist_{:012x}",
                    saltblob_check::history::now_micros() & 0xffff_ffff_ffff
                );
                let url = format!("cql://{host}/{keyspace}?rf=1");
                (saltblob::open_backend(&url).await.expect("cql"), None)
            }
        };
        let gate = ComposeGate::new(layer(raw));
        let clock = OffsetClock::new();
        let store = BlobStore::new(
            Arc::clone(&gate) as Arc<dyn ChunkStore>,
            StoreConfig::default().with_clock(clock.clone()),
        )
        .expect("store");
        let server = TestServer::start_on(store, |c| c).await;
        let created = server
            .client
            .call("PUT", &format!("/{BUCKET}"))
            .send()
            .await;
        assert_eq!(created.status, 200, "{}", created.text());
        let shared = Shared::new(server.client.clone());
        Self {
            server,
            gate,
            clock,
            shared,
            _dir: dir,
        }
    }

    fn store(&self) -> &BlobStore {
        &self.server.store
    }

    /// gc with grace 0, while no read is in flight.
    async fn gc_now(&self) {
        let _exclusive = self.shared.readers.write().await;
        self.store()
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
    }

    /// How far the clock jumps between rounds: past the window in which the compose of an upload left
    /// `completing` may still commit (the server's `completing_window`: a quarter of the intent lease, the
    /// compose's settling time, the one-minute clock margin), with a few seconds to spare.
    fn window(&self) -> Duration {
        self.store().config().intent_lease / 4
            + self.store().compose_settles_within()
            + Duration::from_secs(65)
    }
}

/// A race an uploader drives on its key, through the gate.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Race {
    /// Parts, then a Complete.
    Plain,
    /// The client goes away while its Complete is held at the commit; a PutObject meanwhile; then the commit
    /// and the client's retry.
    ClientGoesAway,
    /// The first Complete is held; a second composes again and commits; gc (grace 0) runs and a PutObject
    /// replaces the object; then the first's commit goes through (gc between the PutObject and that commit is
    /// not raced: see the module documentation).
    SecondCompleteWins,
    /// Two Completes held at their commits together, a PutObject, then the commits let through.
    CompletesHeldTogether,
    /// A Complete whose commit fails unwritten (500), an Abort within the window (409); after the window,
    /// between rounds, the Abort proceeds (204) and a Complete finds no upload.
    AbortAfterFailedComplete,
    /// A DeleteObject, a Complete whose commit fails unwritten, an Abort (409), then the retried Complete.
    RetryAfterFailedComplete,
    /// A Complete whose commit fails and lands later; an Abort before (409) and after it lands.
    CommitLandsLate,
    /// An Abort while a Complete is held (409), a PutObject and gc meanwhile; then the commit.
    AbortDuringHeldComplete,
    /// Part 1 uploaded again with another value's bytes: its upload read the record `open`, and it finishes
    /// while a Complete is held (refused); gc meanwhile; then the commit.
    PartAgainDuringComplete,
    /// Part 2 uploaded again with another value's bytes before a Complete listing the old ETags (refused:
    /// `InvalidPart`); then part 1 too, and a Complete of the new value.
    PartAgainBeforeComplete,
    /// A Complete held past 5 s: 200 at once, the result when it is there.
    CompleteKeptAlive,
    /// A Complete whose commit fails (500) but is still in flight, an Abort within the window (409); after the
    /// window, between rounds, the Abort proceeds (204: the parts are given up), gc (grace 0) runs, and only then
    /// the commit lands (the timing assumption broken on purpose): the object it commits must read whole, the
    /// core's fence between a compose and a discard (`docs/guarantees.md`, *Segments*).
    CommitLandsAfterAbort,
}

/// What a race leaves for after the commit window: an upload to abort, the value its completes listed, and
/// whether its commit is still to land (after the abort and a gc).
struct Leftover {
    upload: Upload,
    value: Value,
    lands_late: bool,
}

impl Race {
    /// Every race: six rounds of two keys.
    const SCHEDULE: [[Race; 2]; 6] = [
        [Race::SecondCompleteWins, Race::CompleteKeptAlive],
        [Race::ClientGoesAway, Race::AbortAfterFailedComplete],
        [Race::CompletesHeldTogether, Race::PartAgainDuringComplete],
        [Race::RetryAfterFailedComplete, Race::CommitLandsLate],
        [Race::AbortDuringHeldComplete, Race::PartAgainBeforeComplete],
        [Race::CommitLandsAfterAbort, Race::Plain],
    ];

    async fn run(self, rig: &Rig, a: &mut Actor, key: &str, rng: &mut Rng) -> Option<Leftover> {
        let gate = &rig.gate;
        let mut up = a.create(key).await;
        let g = a.generation(key, PART + rng.pick(&LAST_PART_SIZES));
        a.upload_parts(&up, &g).await;
        let arrived = gate.arrivals(&g.etag);
        match self {
            Race::Plain => {
                a.complete(&mut up, &g).await;
            }
            Race::ClientGoesAway => {
                let held = gate.hold(&g.etag, 1);
                let first = a.spawn_complete(&mut up, &g);
                gate.reached(&g.etag, arrived + 1).await;
                first.abort();
                let _ = first.await;
                a.shared.tally.bump("complete indeterminate");
                a.put_object(key, rng.pick(&PUT_SIZES)).await;
                a.get(key).await;
                held.release();
                a.complete(&mut up, &g).await;
                a.get(key).await;
            }
            Race::SecondCompleteWins => {
                let held = gate.hold(&g.etag, 1);
                let first = a.spawn_complete(&mut up, &g);
                gate.reached(&g.etag, arrived + 1).await;
                a.complete(&mut up, &g).await;
                a.get(key).await;
                rig.gc_now().await;
                a.put_object(key, rng.pick(&PUT_SIZES)).await;
                held.release();
                first.await.expect("complete task");
                a.get(key).await;
            }
            Race::CompletesHeldTogether => {
                let held = gate.hold(&g.etag, 2);
                let first = a.spawn_complete(&mut up, &g);
                gate.reached(&g.etag, arrived + 1).await;
                let second = a.spawn_complete(&mut up, &g);
                gate.reached(&g.etag, arrived + 2).await;
                a.put_object(key, rng.pick(&PUT_SIZES)).await;
                held.release();
                first.await.expect("complete task");
                second.await.expect("complete task");
            }
            Race::AbortAfterFailedComplete | Race::CommitLandsAfterAbort => {
                let lands_late = matches!(self, Race::CommitLandsAfterAbort);
                a.put_object(key, rng.pick(&PUT_SIZES)).await;
                if lands_late {
                    gate.land_late_next(&g.etag);
                } else {
                    gate.fail_unwritten(&g.etag);
                }
                a.complete(&mut up, &g).await;
                a.abort(&up).await;
                a.get(key).await;
                return Some(Leftover {
                    upload: up,
                    value: g,
                    lands_late,
                });
            }
            Race::RetryAfterFailedComplete => {
                a.delete(key).await;
                gate.fail_unwritten(&g.etag);
                a.complete(&mut up, &g).await;
                a.abort(&up).await;
                a.complete(&mut up, &g).await;
            }
            Race::CommitLandsLate => {
                gate.land_late_next(&g.etag);
                a.complete(&mut up, &g).await;
                a.abort(&up).await;
                assert_eq!(gate.land_late(&g.etag).await, 1, "the late commit lands");
                a.get(key).await;
                a.abort(&up).await;
                a.complete(&mut up, &g).await;
            }
            Race::AbortDuringHeldComplete => {
                let held = gate.hold(&g.etag, 1);
                let completing = a.spawn_complete(&mut up, &g);
                gate.reached(&g.etag, arrived + 1).await;
                a.abort(&up).await;
                a.put_object(key, rng.pick(&PUT_SIZES)).await;
                rig.gc_now().await;
                held.release();
                completing.await.expect("complete task");
            }
            Race::PartAgainDuringComplete => {
                let other = a.generation(key, g.bytes.len());
                let record = up.record_key();
                let reads = gate.watch_reads(&record);
                let (tx, rx) = mpsc::channel::<Bytes>(4);
                let part = other.part(1);
                let uploading = a.upload_part_streamed(&up, 1, &other, rx);
                tx.send(part.slice(..MIB)).await.expect("first bytes");
                // The part's upload has read the record (`open`); the complete now moves it and is held.
                gate.read_after(&record, reads).await;
                let held = gate.hold(&g.etag, 1);
                let completing = a.spawn_complete(&mut up, &g);
                gate.reached(&g.etag, arrived + 1).await;
                tx.send(part.slice(MIB..)).await.expect("the rest");
                drop(tx);
                // It read the upload `open`, but the complete moved it on: refused, and its segment left to the
                // complete's clean-up (the one it would replace is in the compose).
                let refused = uploading
                    .await
                    .expect("part task")
                    .expect("an answer to the part");
                assert_eq!(refused.code(), "NoSuchUpload", "{}", refused.text());
                a.get(key).await;
                rig.gc_now().await;
                held.release();
                completing.await.expect("complete task");
            }
            Race::PartAgainBeforeComplete => {
                let other = a.generation(key, PART + rng.pick(&LAST_PART_SIZES));
                a.upload_part_ok(&up, 2, &other).await;
                a.complete(&mut up, &g).await;
                a.upload_part_ok(&up, 1, &other).await;
                a.complete(&mut up, &other).await;
            }
            Race::CompleteKeptAlive => {
                let held = gate.hold(&g.etag, 1);
                let completing = a.spawn_complete(&mut up, &g);
                gate.reached(&g.etag, arrived + 1).await;
                tokio::time::sleep(Duration::from_millis(5500)).await;
                held.release();
                completing.await.expect("complete task");
            }
        }
        None
    }
}

/// A range across the end of an upload's first part (and inside a PutObject's largest value).
fn across_first_part() -> String {
    format!("bytes={}-{}", PART - 4096, PART + 4095)
}

/// A reader of `key` until `stop`: whole GETs (60 %) and ranged ones.
async fn reader(shared: Arc<Shared>, key: &'static str, stop: Arc<AtomicBool>, seed: u64) {
    let mut a = Actor::new(&shared);
    let mut rng = Rng(seed);
    let across = across_first_part();
    while !stop.load(Ordering::Relaxed) {
        match rng.below(10) {
            0..6 => a.get(key).await,
            6 | 7 => a.get_range(key, &across).await,
            8 => a.get_range(key, "bytes=0-99").await,
            _ => a.get_range(key, "bytes=-5000").await,
        }
        rng.pause(5, 20).await;
    }
}

/// Runs the rounds of [`Race::SCHEDULE`] with the background load, then the final writes and reads; returns
/// the checker's report (printed, with the context of each violation) after the explicit checks.
pub(crate) async fn run(rig: &Rig, label: &str) -> Report {
    let shared = &rig.shared;
    let mut uploaders: Vec<Actor> = KEYS.iter().map(|_| Actor::new(shared)).collect();
    let mut rngs: Vec<Rng> = (0..KEYS.len() as u64).map(|i| Rng(0x5eed + i)).collect();
    let mut last = Actor::new(shared);
    // Before any write: every key is absent.
    for key in KEYS {
        last.get(key).await;
    }
    for (round, races) in Race::SCHEDULE.iter().enumerate() {
        let stop = Arc::new(AtomicBool::new(false));
        let background: Vec<_> = KEYS
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let seed = (round * 16 + i) as u64;
                tokio::spawn(reader(Arc::clone(shared), key, Arc::clone(&stop), seed))
            })
            .collect();
        let leftovers = join_all(
            uploaders
                .iter_mut()
                .zip(rngs.iter_mut())
                .zip(KEYS.iter().zip(races))
                .map(|((a, rng), (key, race))| race.run(rig, a, key, rng)),
        )
        .await;
        stop.store(true, Ordering::Relaxed);
        for task in background {
            task.await.expect("background client");
        }
        // Between rounds: past the commit window, the uploads left `completing` are aborted (a commit still in
        // flight lands after the abort and a gc), and a Complete again answers for them.
        rig.clock.advance(rig.window());
        for (a, leftover) in uploaders.iter_mut().zip(leftovers) {
            if let Some(mut left) = leftover {
                a.abort(&left.upload).await;
                if left.lands_late {
                    rig.gc_now().await;
                    let landed = rig.gate.land_late(&left.value.etag).await;
                    assert_eq!(landed, 1, "the late commit lands after the abort");
                }
                a.complete(&mut left.upload, &left.value).await;
            }
        }
        rig.gc_now().await;
        // What each race left, after gc with grace 0: whole, and across the first part's end.
        for key in KEYS {
            last.get(key).await;
            last.get_range(key, &across_first_part()).await;
        }
        println!("{label}: round {round} ({races:?}) done");
    }
    // Each key's last write is a completed upload; then every lease and window passes, gc runs, and every key
    // is read again.
    for ((a, rng), key) in uploaders.iter_mut().zip(rngs.iter_mut()).zip(KEYS) {
        Race::Plain.run(rig, a, key, rng).await;
    }
    rig.clock.advance(Duration::from_secs(3600));
    rig.gc_now().await;
    rig.gc_now().await;
    for key in KEYS {
        last.get(key).await;
        last.get_range(key, &across_first_part()).await;
    }

    let history = shared.sink.history();
    let report = check(&history);
    println!("{label}: {}", report.summary());
    for line in shared.tally.lines() {
        println!("{label}:   {line}");
    }
    for v in report.violations.iter().take(10) {
        println!("{label}: VIOLATION {v}");
        for op in context(&history, v, 200_000) {
            println!("{label}:     {}", describe_op(op));
        }
    }
    report
}

/// The explicit checks after a clean history: the races happened, fsck finds no damage, no upload is left in
/// progress.
async fn check_races_happened(rig: &Rig, label: &str) {
    let tally = &rig.shared.tally;
    for (what, at_least) in [
        ("complete ok", 10),
        ("complete failed", 2),
        ("complete indeterminate", 4),
        ("abort 409 OperationAborted", 3),
        ("abort 204", 2),
        ("upload part 404 NoSuchUpload", 1),
    ] {
        assert!(
            tally.get(what) >= at_least,
            "{label}: fewer than {at_least} of {what:?}: {:?}",
            tally.lines()
        );
    }
    let f = rig.store().fsck(&FsckOptions::new()).await.expect("fsck");
    assert!(f.damaged.is_empty(), "{label}: {f:?}");
    let uploads = rig
        .server
        .client
        .call("GET", &format!("/{BUCKET}"))
        .query("uploads", "")
        .send()
        .await;
    assert_eq!(uploads.status, 200, "{}", uploads.text());
    assert_eq!(
        uploads.xml("UploadId"),
        Vec::<String>::new(),
        "{label}: no upload left in progress"
    );
}

async fn clean_run(backend: Backend, label: &str) {
    let rig = Rig::new(backend, |b| b).await;
    let report = run(&rig, label).await;
    assert!(report.is_clean(), "{label}: {}", report.summary());
    assert!(
        report.gets_with_value > 0 && report.gets_not_found > 0,
        "{report}"
    );
    check_races_happened(&rig, label).await;
}

/// The races on the memory backend: the history is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_races_lose_nothing_committed_memory() {
    clean_run(Backend::Memory, "memory").await;
}

/// The races on RocksDB: the history is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_races_lose_nothing_committed_rocksdb() {
    clean_run(Backend::Rocks, "rocksdb").await;
}

/// The races on Cassandra or ScyllaDB (`TEST_CQL=host:port`, a keyspace of its own): the history is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn multipart_races_lose_nothing_committed_cql() {
    clean_run(Backend::Cql, "cql").await;
}
