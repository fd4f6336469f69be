//! Integration tests of the S3 server: an in-process server on 127.0.0.1:0 over a temporary embedded store (or
//! the memory backend), driven by a small SigV4-signing client (`client.rs`).

mod acl;
mod auth;
mod buckets;
mod client;
mod cors;
mod disk_faults;
mod forge;
mod grants;
mod health;
mod integrity;
mod lifecycle;
mod limits;
mod list;
mod multipart;
mod multipart_history;
mod multipart_races;
mod objects;
mod resource_faults;
mod sealed_metadata;
mod serving;
mod settings;
mod sse;
mod tagging;
mod tls;
mod versioning;

use std::net::SocketAddr;
use std::time::Duration;

use saltblob::{BlobStore, StoreConfig};
use saltblob_server::{AccessKey, ServerConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::client::Client;

/// The access key the test server accepts.
pub const ACCESS_KEY: &str = "AKIDTEST";
/// Its secret.
pub const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

/// A server running in this process.
pub struct TestServer {
    /// A client signing with [`ACCESS_KEY`].
    pub client: Client,
    /// The store the server serves.
    pub store: BlobStore,
    /// Where the metrics are served.
    pub metrics_addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    _dir: Option<tempfile::TempDir>,
}

/// Which store a test server runs on.
pub enum StoreKind {
    /// The embedded RocksDB store in a temporary directory.
    Rocks,
    /// The in-memory backend.
    Memory,
    /// The store at this URL, with its parameters (e.g. `memory://?priority=bulk`).
    Url(&'static str),
    /// This store, built by the test (on a counting or slowed backend layer, for instance).
    Store(BlobStore),
}

impl TestServer {
    /// A server on a new store, accepting [`ACCESS_KEY`]; `configure` may change its configuration.
    pub async fn start_with(
        kind: StoreKind,
        configure: impl FnOnce(ServerConfig) -> ServerConfig,
    ) -> Self {
        let (url, dir) = match kind {
            StoreKind::Rocks => {
                let dir = tempfile::tempdir().expect("temp dir");
                (format!("rocksdb://{}", dir.path().display()), Some(dir))
            }
            StoreKind::Memory => ("memory://".to_owned(), None),
            StoreKind::Url(url) => (url.to_owned(), None),
            StoreKind::Store(store) => return Self::start_on(store, configure).await,
        };
        let store = saltblob::open(&url, StoreConfig::default())
            .await
            .expect("open store");
        let mut server = Self::start_on(store, configure).await;
        server._dir = dir;
        server
    }

    /// A server in front of `store` (built by the test: over a layer that holds or fails calls, with a clock
    /// the test moves), accepting [`ACCESS_KEY`]; `configure` may change its configuration.
    pub async fn start_on(
        store: BlobStore,
        configure: impl FnOnce(ServerConfig) -> ServerConfig,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind metrics");
        let addr = listener.local_addr().expect("addr");
        let metrics_addr = metrics.local_addr().expect("metrics addr");
        let config = configure(
            ServerConfig::new(vec![AccessKey::new(ACCESS_KEY, SECRET)])
                .with_metrics_listener(metrics)
                .with_gc_every(None),
        );
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(saltblob_server::run(
            listener,
            config,
            store.clone(),
            async {
                let _ = rx.await;
            },
        ));
        Self {
            client: Client {
                addr,
                access_key: ACCESS_KEY.to_owned(),
                secret: SECRET.to_owned(),
                region: "us-east-1".to_owned(),
            },
            store,
            metrics_addr,
            shutdown: Some(tx),
            task: Some(task),
            _dir: None,
        }
    }

    /// A server on a new embedded store with the default configuration.
    pub async fn start() -> Self {
        Self::start_with(StoreKind::Rocks, |c| c).await
    }

    /// A server with a bucket named `bucket`.
    pub async fn with_bucket(bucket: &str) -> Self {
        let server = Self::start().await;
        let reply = server
            .client
            .call("PUT", &format!("/{bucket}"))
            .send()
            .await;
        assert_eq!(reply.status, 200, "create bucket: {}", reply.text());
        server
    }

    /// Asks the server to shut down; returns its task, which ends when the shutdown is complete.
    pub fn shut_down(&mut self) -> JoinHandle<std::io::Result<()>> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.take().expect("running")
    }

    /// The metrics text.
    pub async fn metrics(&self) -> String {
        let reply = self.probe("GET", "/metrics").await;
        assert_eq!(reply.status, 200);
        reply.text()
    }

    /// The reply of the metrics listener to `method` `path` (`/metrics`, `/healthz`, `/readyz`).
    pub async fn probe(&self, method: &str, path: &str) -> client::Reply {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.metrics_addr.to_string())
            .body(http_body_util::BodyExt::boxed(http_body_util::Full::new(
                bytes::Bytes::new(),
            )))
            .expect("request");
        client::send_raw(self.metrics_addr, request).await
    }
}

/// Waits for `task` (a server shutting down), at most 60 s.
pub async fn stopped(task: JoinHandle<std::io::Result<()>>) {
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("server stops")
        .expect("server task")
        .expect("server result");
}
