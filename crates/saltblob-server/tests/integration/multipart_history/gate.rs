//! [`ComposeGate`]: a store layer that recognises the commit of a compose (a manifest write whose body is
//! segmented) by the multipart ETag in its metadata, and holds it, fails it, or makes it land late, as the test
//! asks for that upload; any other commit passes. It also counts the reads of chosen records (an upload's),
//! so that a test knows when a request has read the upload's state.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use saltblob::{
    ChunkStore, ChunkStoreLayer, Error, Manifest, ManifestBody, Namespace, Precondition,
    RecordWrite, Result,
};
use tokio::sync::watch;

/// The metadata key of an object's ETag (the server's `s3:etag`).
const ETAG_KEY: &str = "s3:etag";
/// How long a test waits for a commit or a read to arrive before it fails.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(30);

/// What happens to the next commit of one upload's compose.
#[derive(Debug)]
enum Action {
    /// Held until released, then written.
    Hold(watch::Receiver<bool>),
    /// Fails without being written (a timeout before the write reached the store).
    FailUnwritten,
    /// Fails at once, and is written when the test calls [`ComposeGate::land_late`] (a timed-out write that
    /// replicas apply afterwards).
    LandLate,
}

/// Lets held commits through.
#[derive(Debug)]
pub(super) struct Release(watch::Sender<bool>);

impl Release {
    pub(super) fn release(&self) {
        self.0.send_replace(true);
    }
}

/// See the module documentation.
#[derive(Debug)]
pub(super) struct ComposeGate {
    inner: Arc<dyn ChunkStore>,
    /// The actions for the next commits of each multipart ETag, in order; a commit with none passes.
    rules: Mutex<HashMap<String, VecDeque<Action>>>,
    /// Commits arrived so far, by multipart ETag.
    arrivals: watch::Sender<HashMap<String, u64>>,
    /// Commits failed with [`Action::LandLate`], to be written later: multipart ETag, key, value, condition.
    late: Mutex<Vec<(String, Bytes, Bytes, Precondition)>>,
    /// Reads so far of each watched record key.
    reads: watch::Sender<HashMap<Vec<u8>, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ComposeGate {
    pub(super) fn new(inner: Arc<dyn ChunkStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            rules: Mutex::new(HashMap::new()),
            arrivals: watch::Sender::new(HashMap::new()),
            late: Mutex::new(Vec::new()),
            reads: watch::Sender::new(HashMap::new()),
        })
    }

    fn push(&self, etag: &str, action: Action) {
        lock(&self.rules)
            .entry(etag.to_owned())
            .or_default()
            .push_back(action);
    }

    /// Holds the next `n` commits of the compose with multipart ETag `etag` until the returned release.
    pub(super) fn hold(&self, etag: &str, n: usize) -> Release {
        let (tx, rx) = watch::channel(false);
        for _ in 0..n {
            self.push(etag, Action::Hold(rx.clone()));
        }
        Release(tx)
    }

    /// Fails the next commit of `etag`'s compose without writing it.
    pub(super) fn fail_unwritten(&self, etag: &str) {
        self.push(etag, Action::FailUnwritten);
    }

    /// Fails the next commit of `etag`'s compose, and writes it at [`ComposeGate::land_late`].
    pub(super) fn land_late_next(&self, etag: &str) {
        self.push(etag, Action::LandLate);
    }

    /// Writes the commits of `etag`'s compose failed with [`ComposeGate::land_late_next`] (each on its own
    /// condition: one whose condition no longer holds does not land, as a late conditional write would not).
    /// Returns how many landed.
    pub(super) async fn land_late(&self, etag: &str) -> usize {
        let late: Vec<_> = {
            let mut all = lock(&self.late);
            let (mine, others) = std::mem::take(&mut *all)
                .into_iter()
                .partition(|(e, ..)| e == etag);
            *all = others;
            mine
        };
        let mut landed = 0;
        for (_, key, value, cond) in late {
            let written = self
                .inner
                .put_record(Namespace::Manifest, &key, value, &cond)
                .await
                .expect("the late write reaches the store");
            landed += usize::from(matches!(written, RecordWrite::Done(_)));
        }
        landed
    }

    /// Commits of `etag`'s compose arrived so far (held, failed or written).
    pub(super) fn arrivals(&self, etag: &str) -> u64 {
        self.arrivals.borrow().get(etag).copied().unwrap_or(0)
    }

    /// Waits until `n` commits of `etag`'s compose have arrived.
    pub(super) async fn reached(&self, etag: &str, n: u64) {
        let mut rx = self.arrivals.subscribe();
        tokio::time::timeout(
            ARRIVAL_TIMEOUT,
            rx.wait_for(|a| a.get(etag).copied().unwrap_or(0) >= n),
        )
        .await
        .unwrap_or_else(|_| panic!("commit {n} of compose {etag} arrives within 30 s"))
        .expect("gate alive");
    }

    /// Counts the reads of record `key` from now on; returns the count so far.
    pub(super) fn watch_reads(&self, key: &str) -> u64 {
        let mut count = 0;
        self.reads.send_modify(|r| {
            count = *r.entry(key.as_bytes().to_vec()).or_insert(0);
        });
        count
    }

    /// Waits until record `key` (watched) has been read more than `n` times.
    pub(super) async fn read_after(&self, key: &str, n: u64) {
        let mut rx = self.reads.subscribe();
        tokio::time::timeout(
            ARRIVAL_TIMEOUT,
            rx.wait_for(|r| r.get(key.as_bytes()).is_some_and(|c| *c > n)),
        )
        .await
        .unwrap_or_else(|_| panic!("record {key} is read within 30 s"))
        .expect("gate alive");
    }
}

/// The multipart ETag of a manifest write that commits a compose, `None` for any other write.
fn compose_etag(value: &Bytes) -> Option<String> {
    let manifest = Manifest::decode(value, &|| "a manifest written".to_owned()).ok()?;
    match manifest.body {
        ManifestBody::Segmented(_) => manifest.metadata.get(ETAG_KEY).cloned(),
        _ => None,
    }
}

#[async_trait]
impl ChunkStoreLayer for ComposeGate {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        let read = self.inner.get_record(ns, key).await;
        // Counted once it has returned: a test that saw the count knows what the read found.
        if ns == Namespace::Manifest && self.reads.borrow().contains_key(key) {
            self.reads.send_modify(|r| {
                if let Some(c) = r.get_mut(key) {
                    *c += 1;
                }
            });
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
        let etag = (ns == Namespace::Manifest)
            .then(|| compose_etag(&value))
            .flatten();
        let Some(etag) = etag else {
            return self.inner.put_record(ns, key, value, cond).await;
        };
        // The action is taken before the arrival is counted: a test that saw the arrival ([`Self::reached`])
        // knows that this commit has its action, and that the next commit of the upload gets the next one.
        // Counted first, a commit preempted between the two could have a later commit take its action.
        let action = lock(&self.rules)
            .get_mut(&etag)
            .and_then(VecDeque::pop_front);
        self.arrivals
            .send_modify(|a| *a.entry(etag.clone()).or_insert(0) += 1);
        match action {
            None => {}
            Some(Action::Hold(mut open)) => {
                let _ = open.wait_for(|o| *o).await;
            }
            Some(Action::FailUnwritten) => {
                return Err(Error::backend(
                    "gate",
                    "injected: the commit timed out before it was written",
                    false,
                ));
            }
            Some(Action::LandLate) => {
                lock(&self.late).push((etag, Bytes::copy_from_slice(key), value, cond.clone()));
                return Err(Error::backend(
                    "gate",
                    "injected: the commit timed out (it lands later)",
                    false,
                ));
            }
        }
        self.inner.put_record(ns, key, value, cond).await
    }
}
