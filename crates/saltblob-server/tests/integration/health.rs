//! The metrics listener's health and readiness probes (`/healthz`, `/readyz`), its build and process metrics,
//! and its 404 for other paths; the S3 listener keeps `/healthz` as S3's (a bucket may be called so).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::{StoreKind, TestServer, stopped};

/// How a [`Flaky`] store answers record reads.
const SERVES: u8 = 0;
const FAILS: u8 = 1;
const HANGS: u8 = 2;

/// A memory store whose record reads succeed, fail or never answer, as the test sets.
#[derive(Debug)]
struct Flaky {
    inner: saltblob_core::MemoryStore,
    mode: Arc<AtomicU8>,
}

#[async_trait::async_trait]
impl saltblob_core::ChunkStoreLayer for Flaky {
    fn inner(&self) -> &dyn saltblob_core::ChunkStore {
        &self.inner
    }

    async fn get_record(
        &self,
        ns: saltblob_core::Namespace,
        key: &[u8],
    ) -> saltblob_core::Result<Option<Bytes>> {
        match self.mode.load(Ordering::SeqCst) {
            FAILS => Err(saltblob_core::Error::backend(
                "flaky",
                "the disk is on fire",
                false,
            )),
            HANGS => std::future::pending().await,
            _ => {
                let inner: &dyn saltblob_core::ChunkStore = &self.inner;
                inner.get_record(ns, key).await
            }
        }
    }
}

/// A server on a [`Flaky`] store, and the switch of its mode.
async fn flaky_server() -> (TestServer, Arc<AtomicU8>) {
    let mode = Arc::new(AtomicU8::new(SERVES));
    let backend = Arc::new(Flaky {
        inner: saltblob_core::MemoryStore::new(),
        mode: Arc::clone(&mode),
    });
    let store = saltblob::BlobStore::new(backend, saltblob::StoreConfig::default()).expect("store");
    let s = TestServer::start_with(StoreKind::Store(store), |c| c).await;
    (s, mode)
}

#[tokio::test]
async fn healthz_and_readyz_answer_on_the_metrics_listener_only() {
    let s = TestServer::with_bucket("healthz").await;
    let health = s.probe("GET", "/healthz").await;
    assert_eq!((health.status, health.text().as_str()), (200, "ok\n"));
    let ready = s.probe("GET", "/readyz").await;
    assert_eq!((ready.status, ready.text().as_str()), (200, "ready\n"));
    // HEAD answers as GET, without a body.
    let head = s.probe("HEAD", "/readyz").await;
    assert_eq!((head.status, head.body.len()), (200, 0));
    // The S3 listener's /healthz is the bucket `healthz` (here listed, signed).
    let listing = s
        .client
        .call("GET", "/healthz")
        .query("list-type", "2")
        .send()
        .await;
    assert_eq!(listing.status, 200, "{}", listing.text());
    assert!(
        listing.text().contains("<Name>healthz</Name>"),
        "{}",
        listing.text()
    );
}

#[tokio::test]
async fn other_paths_of_the_metrics_listener_are_404_naming_the_served_ones() {
    let s = TestServer::start_with(StoreKind::Memory, |c| c).await;
    for path in ["/", "/health", "/readyz/x", "/metrics/"] {
        let reply = s.probe("GET", path).await;
        assert_eq!(reply.status, 404, "{path}");
        let text = reply.text();
        for served in ["/metrics", "/healthz", "/readyz"] {
            assert!(text.contains(served), "{path}: {text}");
        }
    }
    assert_eq!(s.probe("POST", "/readyz").await.status, 405);
}

/// `/readyz` asks the store each time: 503 with the store's error while it fails, 200 again once it serves.
#[tokio::test]
async fn readyz_is_503_with_the_reason_while_the_store_fails() {
    let (s, mode) = flaky_server().await;
    assert_eq!(s.probe("GET", "/readyz").await.status, 200);
    mode.store(FAILS, Ordering::SeqCst);
    let reply = s.probe("GET", "/readyz").await;
    let text = reply.text();
    assert_eq!(reply.status, 503, "{text}");
    assert!(
        text.starts_with("not ready: ") && text.contains("the disk is on fire"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
    // The process still serves.
    assert_eq!(s.probe("GET", "/healthz").await.status, 200);
    mode.store(SERVES, Ordering::SeqCst);
    assert_eq!(s.probe("GET", "/readyz").await.status, 200);
}

/// A store that does not answer makes `/readyz` 503 after its timeout (2 s), not a probe that hangs.
#[tokio::test]
async fn readyz_is_503_when_the_store_does_not_answer_in_time() {
    let (s, mode) = flaky_server().await;
    mode.store(HANGS, Ordering::SeqCst);
    let started = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(10), s.probe("GET", "/readyz"))
        .await
        .expect("/readyz answers");
    let took = started.elapsed();
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert!(
        reply.text().contains("did not answer within 2 s"),
        "{}",
        reply.text()
    );
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    mode.store(SERVES, Ordering::SeqCst);
}

/// Once a shutdown has begun (no more connections accepted; requests in flight finishing), `/readyz` is 503 and
/// `/healthz` still 200.
#[tokio::test]
async fn readyz_is_503_once_the_shutdown_begins() {
    let mut s = TestServer::with_bucket("bkt").await;
    let (tx, rx) = mpsc::channel(4);
    let client = s.client.clone();
    let put = tokio::spawn(async move {
        client
            .call("PUT", "/bkt/inflight")
            .stream(rx, 2 << 20)
            .send()
            .await
    });
    let half = Bytes::from(vec![5u8; 1 << 20]);
    tx.send(half.clone()).await.expect("send");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(s.probe("GET", "/readyz").await.status, 200);
    let server = s.shut_down();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!server.is_finished(), "the put in flight holds the server");
    let reply = s.probe("GET", "/readyz").await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (503, "not ready: the server is shutting down\n")
    );
    assert_eq!(s.probe("GET", "/healthz").await.status, 200);
    tx.send(half).await.expect("send");
    drop(tx);
    assert_eq!(put.await.expect("put").status, 200);
    stopped(server).await;
}

#[tokio::test]
async fn metrics_carry_the_build_and_the_process_figures() {
    let s = TestServer::start_with(StoreKind::Memory, |c| c).await;
    let text = s.metrics().await;
    let build = format!(
        "saltblob_build_info{{version=\"{}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&build), "{build} missing from\n{text}");
    assert!(
        text.contains("# TYPE saltblob_build_info gauge\n"),
        "{text}"
    );
    if cfg!(target_os = "linux") {
        let figure = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("{name} missing from\n{text}"))
        };
        // The two listeners and the test's connection at least.
        assert!(figure("process_open_fds") >= 3.0, "{text}");
        assert!(
            figure("process_max_fds") >= figure("process_open_fds"),
            "{text}"
        );
        assert!(figure("process_resident_memory_bytes") > 1e6, "{text}");
        assert!(
            figure("process_virtual_memory_bytes") >= figure("process_resident_memory_bytes"),
            "{text}"
        );
        assert!(figure("process_cpu_seconds_total") >= 0.0, "{text}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        let started = figure("process_start_time_seconds");
        assert!(
            started <= now + 2.0 && started > now - 24.0 * 3600.0,
            "{started} vs now {now}"
        );
    }
}
