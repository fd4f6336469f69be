//! Multipart races, driven deterministically through a store layer ([`HeldCommit`]) that holds the object's
//! manifest write (the compose's commit, as issued to the engine: past its deadline check) until the test
//! releases it, or makes it fail before or after it
//! lands, or land only later (as a write that timed out on a cluster may): a client that goes away during
//! Complete, Abort while a Complete is held or after one whose outcome is unknown, a part uploaded again
//! during Complete, two Completes racing, a commit that lands after the window the server waits out.
//!
//! Each ends with the same explicit check ([`check_after_gc`]): with every lease and the commit window over,
//! gc (grace 0) takes nothing the committed object owns (it reads back whole, byte for byte), `fsck` finds no
//! damage, and an uncommitted object stays absent; and the upload answered (no request hangs, no upload stays
//! stuck).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use saltblob::{
    BlobStore, ChunkStore, ChunkStoreLayer, Error, FsckOptions, GcOptions, Manifest, MemoryStore,
    Namespace, OffsetClock, Precondition, RecordWrite, Result, StoreConfig, VersionId,
};
use tokio::sync::watch;

use crate::TestServer;
use crate::client::Client;
use crate::multipart::{MIB, complete, create, md5_hex, part, stored_chunks, upload};

/// What the held commit does once it is let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum After {
    /// It lands and reports success.
    Land = 0,
    /// It fails without being written (a timeout before the write reached the store).
    FailUnwritten = 1,
    /// It fails at once, and lands later, when the test calls [`HeldCommit::land_late`] (a timed-out write
    /// that replicas apply afterwards).
    LandLate = 2,
}

/// A layer that holds the manifest writes of one store key (the object's) while closed, counts the reads of
/// another (an upload record's), and can make every compare-and-set of a third (an upload record) lose to a
/// competing write.
#[derive(Debug)]
struct HeldCommit {
    inner: Arc<dyn ChunkStore>,
    key: Vec<u8>,
    open: watch::Sender<bool>,
    arrived: watch::Sender<u64>,
    after: AtomicU8,
    late: Mutex<Vec<(Bytes, Precondition)>>,
    watched: Mutex<Vec<u8>>,
    reads: watch::Sender<u64>,
    contended: Mutex<Option<Vec<u8>>>,
    lost: AtomicU64,
}

impl HeldCommit {
    fn new(inner: Arc<dyn ChunkStore>, key: &str) -> Arc<Self> {
        Arc::new(Self {
            inner,
            key: key.as_bytes().to_vec(),
            open: watch::Sender::new(true),
            arrived: watch::Sender::new(0),
            after: AtomicU8::new(After::Land as u8),
            late: Mutex::new(Vec::new()),
            watched: Mutex::new(Vec::new()),
            reads: watch::Sender::new(0),
            contended: Mutex::new(None),
            lost: AtomicU64::new(0),
        })
    }

    /// From now on (`Some`), every compare-and-set of record `key` loses: right before it, the record is written
    /// again with a new version (as a part's upload touches it), so its condition no longer holds; `None` stops.
    fn contend(&self, key: Option<&str>) {
        *self.contended.lock().expect("lock") = key.map(|k| k.as_bytes().to_vec());
    }

    /// How many compare-and-sets of the contended record lost so far.
    fn lost(&self) -> u64 {
        self.lost.load(Ordering::SeqCst)
    }

    /// The competing write of a contended record: the current one again, under a new version.
    async fn overtake(&self, key: &[u8]) -> Result<()> {
        if let Some(raw) = self.inner.get_record(Namespace::Manifest, key).await? {
            let mut m = Manifest::decode(&raw, &|| "an upload record".to_owned())?;
            m.version = VersionId::generate();
            self.inner
                .put_record(Namespace::Manifest, key, m.encode(), &Precondition::None)
                .await?;
            self.lost.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Counts the reads of record `key` from now on; returns the count so far.
    fn watch_reads(&self, key: &str) -> u64 {
        *self.watched.lock().expect("lock") = key.as_bytes().to_vec();
        *self.reads.borrow()
    }

    /// Waits until the watched record has been read more than `n` times.
    async fn read_after(&self, n: u64) {
        let mut rx = self.reads.subscribe();
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|r| *r > n))
            .await
            .expect("the record is read within 30 s")
            .expect("layer alive");
    }

    /// Holds the object's manifest writes from now on.
    fn hold(&self) {
        self.open.send_replace(false);
    }

    /// Lets held writes, and later ones, through.
    fn release(&self) {
        self.open.send_replace(true);
    }

    /// Waits until `n` manifest writes of the object have arrived (held or not) since the layer was made.
    async fn reached(&self, n: u64) {
        let mut rx = self.arrived.subscribe();
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|a| *a >= n))
            .await
            .expect("the commit arrives within 30 s")
            .expect("layer alive");
    }

    fn set_after(&self, after: After) {
        self.after.store(after as u8, Ordering::SeqCst);
    }

    /// Applies the writes that failed with [`After::LandLate`].
    async fn land_late(&self) {
        let late = std::mem::take(&mut *self.late.lock().expect("lock"));
        for (value, cond) in late {
            self.inner
                .put_record(Namespace::Manifest, &self.key, value, &cond)
                .await
                .expect("the late write lands");
        }
    }
}

#[async_trait]
impl ChunkStoreLayer for HeldCommit {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        let read = self.inner.get_record(ns, key).await;
        // Counted once it has returned: a test that saw the count knows what the read found.
        if ns == Namespace::Manifest && *self.watched.lock().expect("lock") == key {
            self.reads.send_modify(|n| *n += 1);
        }
        read
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let contended = self.contended.lock().expect("lock").as_deref() == Some(key);
        if ns == Namespace::Manifest && contended && matches!(cond, Precondition::Equals(_)) {
            self.overtake(key).await?;
        }
        if ns != Namespace::Manifest || key != self.key {
            return self.inner.put_record(ns, key, value, cond).await;
        }
        // The hold stands for the way from the engine to the store (a cluster's replicas): the write was issued
        // when it got here, so its deadline is checked now, and once let through it lands, deadline or not.
        saltblob_core::backend::deadline::check_current()?;
        let mut open = self.open.subscribe();
        self.arrived.send_modify(|n| *n += 1);
        let _ = open.wait_for(|o| *o).await;
        match self.after.load(Ordering::SeqCst) {
            x if x == After::FailUnwritten as u8 => Err(Error::backend(
                "held",
                "injected: the commit timed out before it was written",
                false,
            )),
            x if x == After::LandLate as u8 => {
                self.late.lock().expect("lock").push((value, cond.clone()));
                Err(Error::backend(
                    "held",
                    "injected: the commit timed out (it lands later)",
                    false,
                ))
            }
            // On a task of its own, which the deadline (a task-local of the commit's task) does not reach.
            _ => {
                let (inner, key, cond) = (Arc::clone(&self.inner), key.to_vec(), cond.clone());
                tokio::spawn(async move { inner.put_record(ns, &key, value, &cond).await })
                    .await
                    .map_err(|e| Error::internal("held commit", e))?
            }
        }
    }
}

const PATH: &str = "/bkt/obj";
const KEY: &str = "s3/o/bkt/obj";

/// A server on the memory backend behind a [`HeldCommit`] of [`KEY`], with a clock the test moves, and a bucket.
struct Rig {
    server: TestServer,
    held: Arc<HeldCommit>,
    clock: Arc<OffsetClock>,
}

impl Rig {
    async fn new() -> Self {
        let held = HeldCommit::new(Arc::new(MemoryStore::new()), KEY);
        let clock = OffsetClock::new();
        let store = BlobStore::new(
            Arc::clone(&held) as Arc<dyn ChunkStore>,
            StoreConfig::default().with_clock(clock.clone()),
        )
        .expect("store");
        let server = TestServer::start_on(store, |c| c).await;
        let r = server.client.call("PUT", "/bkt").send().await;
        assert_eq!(r.status, 200, "{}", r.text());
        Self {
            server,
            held,
            clock,
        }
    }

    fn client(&self) -> &Client {
        &self.server.client
    }

    fn store(&self) -> &BlobStore {
        &self.server.store
    }

    /// An upload of [`PATH`] with two parts; returns its id, the parts as Complete lists them, and the object.
    async fn upload_two_parts(&self) -> (String, Vec<(u32, String)>, Bytes) {
        let c = self.client();
        let id = create(c, PATH).await;
        let (p1, p2) = (part(5 * MIB, 1), part(MIB, 2));
        let e1 = upload(c, PATH, &id, 1, &p1).await;
        let e2 = upload(c, PATH, &id, 2, &p2).await;
        let whole = Bytes::from([&p1[..], &p2[..]].concat());
        (id, vec![(1, e1), (2, e2)], whole)
    }

    async fn complete(&self, id: &str, parts: &[(u32, String)]) -> crate::client::Reply {
        let listed: Vec<(u32, &str)> = parts.iter().map(|(n, e)| (*n, e.as_str())).collect();
        complete(self.client(), PATH, id, &listed).await
    }

    /// Sends the complete in a task of its own.
    fn spawn_complete(
        &self,
        id: &str,
        parts: &[(u32, String)],
    ) -> tokio::task::JoinHandle<crate::client::Reply> {
        let client = self.client().clone();
        let (id, parts) = (id.to_owned(), parts.to_vec());
        tokio::spawn(async move {
            let listed: Vec<(u32, &str)> = parts.iter().map(|(n, e)| (*n, e.as_str())).collect();
            complete(&client, PATH, &id, &listed).await
        })
    }

    async fn abort(&self, id: &str) -> crate::client::Reply {
        self.client()
            .call("DELETE", PATH)
            .query("uploadId", id)
            .send()
            .await
    }

    /// The upload's state, as its record says ("" when there is no record).
    async fn state(&self, id: &str) -> String {
        match self.store().head(format!("s3/u/bkt/u/{id}")).await {
            Ok(m) => m
                .metadata
                .get("s3:upload-state")
                .cloned()
                .unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits (at most 30 s) until the upload's record says `state`.
    async fn wait_state(&self, id: &str, state: &str) {
        for _ in 0..300 {
            if self.state(id).await == state {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "upload {id} is {:?}, not {state:?}, after 30 s",
            self.state(id).await
        );
    }

    /// Waits (at most 30 s) until every upload's clean-up has run: no segment or part record is left. A
    /// complete gives up the segments its object does not own in a task of its own, after its reply and after
    /// the record says `completed`; gc only reclaims a segment once it has been given up (or its lease ended).
    async fn wait_cleaned_up(&self) {
        let left = || async {
            let mut n = 0;
            for prefix in ["s3/u/bkt/s/", "s3/u/bkt/p/"] {
                n += self.store().list(prefix).await.expect("list").len();
            }
            n
        };
        for _ in 0..300 {
            if left().await == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{} segment or part records left after 30 s", left().await);
    }

    /// A gc pass with grace 0, now.
    async fn gc_now(&self) -> saltblob::GcReport {
        self.store()
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc")
    }

    /// Moves the clock past every lease, the window a completing upload is given, and the grace period; then
    /// checks that gc (grace 0) takes nothing the object owns: it reads back as `expected` (or stays absent),
    /// fsck finds no damage, and no chunk is left but the object's.
    async fn check_after_gc(&self, expected: Option<&Bytes>) {
        self.wait_cleaned_up().await;
        self.clock.advance(Duration::from_secs(3600));
        let store = self.store();
        for _ in 0..2 {
            self.gc_now().await;
        }
        let got = self.client().get(PATH).await;
        match expected {
            Some(data) => {
                assert_eq!(got.status, 200, "{}", got.text());
                assert!(got.body == *data, "the object reads back whole after gc");
                let m = store.head(KEY).await.expect("head");
                assert_eq!(
                    stored_chunks(&self.server, KEY.as_bytes()).await,
                    m.segments().iter().map(|s| s.chunk_count()).sum::<u64>(),
                    "no chunk left but the object's"
                );
            }
            None => {
                assert_eq!(got.code(), "NoSuchKey", "{}", got.text());
                assert_eq!(
                    stored_chunks(&self.server, KEY.as_bytes()).await,
                    0,
                    "every part reclaimed"
                );
            }
        }
        let f = store.fsck(&FsckOptions::new()).await.expect("fsck");
        assert!(f.damaged.is_empty(), "{f:?}");
    }
}

/// The multipart ETag of parts with these ETags.
fn etag_of(parts: &[(u32, String)]) -> String {
    let raw: Vec<u8> = parts
        .iter()
        .flat_map(|(_, e)| {
            (0..16).map(move |i| u8::from_str_radix(&e[2 * i..2 * i + 2], 16).expect("hex"))
        })
        .collect();
    format!("\"{}-{}\"", md5_hex(&raw), parts.len())
}

fn reply_etag(r: &crate::client::Reply) -> String {
    r.xml("ETag")
        .pop()
        .unwrap_or_default()
        .replace("&quot;", "\"")
}

/// A client that goes away while its Complete is held does not stop it: the object commits whole, the upload
/// ends `completed`, and the client's retry answers 200 with the same ETag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_whose_client_goes_away_still_commits() {
    let r = Rig::new().await;
    let (id, parts, whole) = r.upload_two_parts().await;
    r.held.hold();
    let client = r.spawn_complete(&id, &parts);
    r.held.reached(1).await;
    client.abort();
    let _ = client.await;
    // The connection is gone; the complete is still held at its commit.
    tokio::time::sleep(Duration::from_millis(200)).await;
    r.held.release();
    r.wait_state(&id, "completed").await;
    let again = r.complete(&id, &parts).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(reply_etag(&again), etag_of(&parts));
    assert_eq!(
        again.xml("Location").pop().as_deref(),
        Some("/bkt/obj"),
        "{}",
        again.text()
    );
    r.check_after_gc(Some(&whole)).await;
}

/// A Complete whose commit fails without landing (its outcome unknown to the server) leaves the upload
/// `completing`: an Abort within the window answers `OperationAborted` (409) and gives up nothing; after the
/// window it aborts, and the parts are reclaimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_after_an_unknown_complete_waits_out_the_window() {
    let r = Rig::new().await;
    let (id, parts, _) = r.upload_two_parts().await;
    r.held.set_after(After::FailUnwritten);
    let failed = r.complete(&id, &parts).await;
    assert_eq!(failed.status, 500, "{}", failed.text());
    assert_eq!(r.state(&id).await, "completing");
    let listed = r
        .client()
        .call("GET", "/bkt")
        .query("uploads", "")
        .send()
        .await;
    assert_eq!(
        listed.xml("UploadId"),
        vec![id.clone()],
        "still in progress"
    );

    let early = r.abort(&id).await;
    assert_eq!(early.status, 409, "{}", early.text());
    assert_eq!(early.code(), "OperationAborted");
    assert_eq!(r.state(&id).await, "completing", "nothing given up");

    // Past the window (a quarter lease + the compose's three quarters + the clock margin) the abort proceeds.
    r.clock.advance(Duration::from_secs(125));
    let late = r.abort(&id).await;
    assert_eq!(late.status, 204, "{}", late.text());
    r.wait_state(&id, "aborted").await;
    assert_eq!(r.complete(&id, &parts).await.code(), "NoSuchUpload");
    assert_eq!(r.abort(&id).await.code(), "NoSuchUpload");
    r.check_after_gc(None).await;
}

/// A Complete whose commit timed out but lands later (as on a cluster): the upload stays `completing`; once
/// the commit has landed, an Abort finds the object composed and completes the upload instead (`NoSuchUpload`),
/// and a retried Complete answers 200 with the ETag of the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_lands_late_is_resolved_from_the_store() {
    let r = Rig::new().await;
    let (id, parts, whole) = r.upload_two_parts().await;
    r.held.set_after(After::LandLate);
    let failed = r.complete(&id, &parts).await;
    assert_eq!(failed.status, 500, "{}", failed.text());
    assert_eq!(r.state(&id).await, "completing");
    assert_eq!(r.abort(&id).await.code(), "OperationAborted");
    r.held.set_after(After::Land);
    r.held.land_late().await;

    assert_eq!(
        r.abort(&id).await.code(),
        "NoSuchUpload",
        "the complete won"
    );
    r.wait_state(&id, "completed").await;
    let retried = r.complete(&id, &parts).await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(reply_etag(&retried), etag_of(&parts));
    r.check_after_gc(Some(&whole)).await;
}

/// A retried Complete of an upload left `completing` by a commit that never landed composes again (the
/// compose record names the same segments) and answers 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_complete_composes_again_after_an_unknown_outcome() {
    let r = Rig::new().await;
    let (id, parts, whole) = r.upload_two_parts().await;
    r.held.set_after(After::FailUnwritten);
    assert_eq!(r.complete(&id, &parts).await.status, 500);
    r.held.set_after(After::Land);
    // Another list of parts is refused while the first may still commit.
    let other = r.complete(&id, &parts[..1]).await;
    assert_eq!(other.code(), "OperationAborted", "{}", other.text());
    let retried = r.complete(&id, &parts).await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(reply_etag(&retried), etag_of(&parts));
    r.wait_state(&id, "completed").await;
    r.check_after_gc(Some(&whole)).await;
}

/// An Abort while a Complete is held at its commit waits (409) and gives up nothing; the Complete commits, and
/// the Abort then finds no upload (seaweedfs#11385: an abort that discarded the parts of a completing upload
/// corrupted the object).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_during_a_held_complete_gives_up_nothing() {
    let r = Rig::new().await;
    let (id, parts, whole) = r.upload_two_parts().await;
    r.held.hold();
    let completing = r.spawn_complete(&id, &parts);
    r.held.reached(1).await;
    let abort = r.abort(&id).await;
    assert_eq!(abort.code(), "OperationAborted", "{}", abort.text());
    // gc meanwhile (grace 0) reclaims nothing the compose is committing.
    let gc = r.gc_now().await;
    assert_eq!(gc.reclaim.chunks, 0, "{gc:?}");
    r.held.release();
    let done = completing.await.expect("complete task");
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(r.abort(&id).await.code(), "NoSuchUpload");
    r.check_after_gc(Some(&whole)).await;
}

/// A part uploaded again, whose upload read the record `open` before a Complete moved it to `completing`
/// and finishes while the Complete is held at its commit, is refused (`NoSuchUpload`) and gives up nothing,
/// not even the part it replaced (the one being composed), even with gc (grace 0) running meanwhile: the object
/// holds the first part, whole; the new part's bytes are reclaimed afterwards (ceph#16732, ceph#58082).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_uploaded_again_during_complete_stays_out_of_the_object() {
    let r = Rig::new().await;
    let (id, parts, whole) = r.upload_two_parts().await;
    let reads = r.held.watch_reads(&format!("s3/u/bkt/u/{id}"));
    let again = part(5 * MIB, 9);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let uploading = tokio::spawn({
        let client = r.client().clone();
        let (id, len) = (id.clone(), again.len() as u64);
        async move {
            client
                .call("PUT", PATH)
                .query("partNumber", "1")
                .query("uploadId", &id)
                .stream(rx, len)
                .send()
                .await
        }
    });
    tx.send(again.slice(..MIB)).await.expect("first bytes");
    // The part's upload has read the record (`open`); now the complete moves it and is held at its commit.
    r.held.read_after(reads).await;
    r.held.hold();
    let completing = r.spawn_complete(&id, &parts);
    r.held.reached(1).await;
    tx.send(again.slice(MIB..)).await.expect("the rest");
    drop(tx);
    let refused = uploading.await.expect("upload task");
    assert_eq!(refused.code(), "NoSuchUpload", "{}", refused.text());
    let gc = r.gc_now().await;
    assert_eq!(gc.reclaim.chunks, 0, "{gc:?}");
    r.held.release();
    let done = completing.await.expect("complete task");
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(reply_etag(&done), etag_of(&parts));
    r.wait_state(&id, "completed").await;
    r.check_after_gc(Some(&whole)).await;
}

/// Two Completes of one upload racing (the second arrives while the first is held at its commit) both answer
/// 200 with the same ETag; the object is whole, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_completes_racing_both_answer_200() {
    let r = Rig::new().await;
    let (id, parts, whole) = r.upload_two_parts().await;
    r.held.hold();
    let first = r.spawn_complete(&id, &parts);
    r.held.reached(1).await;
    let second = r.spawn_complete(&id, &parts);
    r.held.reached(2).await;
    r.held.release();
    for done in [first, second] {
        let done = done.await.expect("complete task");
        assert_eq!(done.status, 200, "{}", done.text());
        assert_eq!(reply_etag(&done), etag_of(&parts));
    }
    r.wait_state(&id, "completed").await;
    r.check_after_gc(Some(&whole)).await;
}

/// A commit held past the window the server waits out (the store's timing assumption broken on purpose): the
/// abort proceeds and gives the parts up, and the commit, landing after, still owns them whole: gc takes
/// nothing of the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_landing_after_the_window_still_owns_its_parts() {
    let r = Rig::new().await;
    let (id, parts, whole) = r.upload_two_parts().await;
    r.held.hold();
    let completing = r.spawn_complete(&id, &parts);
    r.held.reached(1).await;
    r.clock.advance(Duration::from_secs(125));
    let abort = r.abort(&id).await;
    assert_eq!(abort.status, 204, "{}", abort.text());
    r.wait_state(&id, "aborted").await;
    let gc = r.gc_now().await;
    assert_eq!(
        gc.reclaim.chunks, 0,
        "the discarded parts' leases are not over: {gc:?}"
    );
    r.held.release();
    let done = completing.await.expect("complete task");
    assert_eq!(done.code(), "NoSuchUpload", "{}", done.text());
    r.check_after_gc(Some(&whole)).await;
}

/// A Complete whose upload record keeps changing under it (every compare-and-set of the record loses to a
/// competing write, as under parts uploaded again and again) stops after the bounded attempts of its re-read
/// policy (`UPLOAD_RECORD`: 8, at most 113 ms of waits): 503 SlowDown, within a bound, nothing committed, the
/// upload left `open`; once the record holds still, the same Complete completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_whose_upload_keeps_changing_slows_down_and_a_retry_completes() {
    let r = Rig::new().await;
    let (id, parts, whole) = r.upload_two_parts().await;
    r.held.contend(Some(&format!("s3/u/bkt/u/{id}")));
    let started = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(10), r.complete(&id, &parts))
        .await
        .expect("the complete answers within 10 s");
    let took = started.elapsed();
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.code(), "SlowDown", "{}", reply.text());
    assert!(took < Duration::from_secs(3), "answered in {took:?}");
    assert_eq!(r.held.lost(), 8, "one lost compare-and-set per attempt");
    assert_eq!(r.state(&id).await, "open");
    assert!(matches!(
        r.store().head(KEY).await,
        Err(Error::NotFound { .. })
    ));
    r.held.contend(None);
    let done = r.complete(&id, &parts).await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(reply_etag(&done), etag_of(&parts));
    r.check_after_gc(Some(&whole)).await;
}

/// A Complete still running after 5 s answers 200 at once and keeps the connection alive with whitespace until
/// its result is there (S3 does the same): the result, or the error it ended with, is in the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_complete_keeps_the_connection_alive_and_sends_its_result() {
    let r = Rig::new().await;
    let (id, parts, whole) = r.upload_two_parts().await;
    r.held.hold();
    let completing = r.spawn_complete(&id, &parts);
    r.held.reached(1).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    r.held.release();
    let done = completing.await.expect("complete task");
    assert_eq!(done.status, 200, "{}", done.text());
    assert!(done.text().starts_with("<?xml"), "{}", done.text());
    assert_eq!(reply_etag(&done), etag_of(&parts));

    // One that fails after 5 s (its commit times out): 200, with the error in the body; the upload is then
    // aborted once the window is over.
    let (again, again_parts, _) = r.upload_two_parts().await;
    r.held.set_after(After::FailUnwritten);
    r.held.hold();
    let failing = r.spawn_complete(&again, &again_parts);
    r.held.reached(2).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    r.held.release();
    let failed = failing.await.expect("complete task");
    assert_eq!(failed.status, 200, "{}", failed.text());
    assert_eq!(failed.code(), "InternalError", "{}", failed.text());
    r.held.set_after(After::Land);
    r.clock.advance(Duration::from_secs(125));
    assert_eq!(r.abort(&again).await.status, 204);
    r.check_after_gc(Some(&whole)).await;
}
