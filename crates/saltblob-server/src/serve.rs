//! [`run`]: the accept loop (plain or TLS) under the connection cap, each connection's HTTP/1.1 or HTTP/2
//! driven under its deadlines (`conn.rs`) with the request handler (`handler.rs`), the background tasks beside
//! it (`background.rs`: upkeep, the metrics listener), and graceful shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use saltblob_core::BlobStore;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::background::{Aborting, serve_metrics, upkeep};
use crate::config::ServerConfig;
use crate::conn::{Activity, Deadlines, TimedIo, drive};
use crate::handler::Handler;
use crate::metrics::Metrics;
use crate::probes::Probes;

/// How long a TLS handshake may take before the connection is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval of HTTP/2 keep-alive pings, and how long a ping may go unanswered before the connection closes.
const H2_KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(20));

/// Serves S3 on `listener` (and, if configured, metrics, health and readiness on `config.metrics_listener`)
/// from `store` until `shutdown` completes; then stops accepting (and `/readyz` answers 503), lets the
/// requests in flight finish for up to [`ServerConfig::shutdown_timeout`], and returns. A put whose body had
/// not ended by then is dropped before its commit: nothing of it becomes visible.
///
/// At most [`ServerConfig::max_connections`] connections are served at once (one more is closed as soon as it
/// is accepted) and at most [`ServerConfig::max_requests`] requests (one more is answered `503 SlowDown`).
///
/// # Errors
/// `InvalidInput` when `config` has no access key (anonymous access is only per bucket, for reads).
pub async fn run(
    listener: TcpListener,
    mut config: ServerConfig,
    store: BlobStore,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    if config.credentials.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no access key: give --credentials FILE or set SALTBLOB_ACCESS_KEY_ID and SALTBLOB_SECRET_ACCESS_KEY",
        ));
    }
    let metrics = Arc::new(Metrics::default());
    let handler = Handler::new(&config, store.clone(), Arc::clone(&metrics));
    let _upkeep = config.gc_every.map(|every| {
        Aborting(tokio::spawn(upkeep(
            store.clone(),
            every,
            crate::lifecycle::Days::of_length(config.lifecycle_day),
            Arc::clone(&metrics),
        )))
    });
    // Sent when the server begins to shut down: connections close gracefully, and `/readyz` answers 503.
    let (stop, stopping) = watch::channel(false);
    let _metrics_server = config.metrics_listener.take().map(|l| {
        let probes = Probes {
            metrics: Arc::clone(&metrics),
            store: store.clone(),
            stopping: stopping.clone(),
        };
        Aborting(tokio::spawn(serve_metrics(
            l,
            probes,
            config.first_request_timeout,
            config.io_timeout,
        )))
    });
    let tls = config.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Idle connections (HTTP/1.1 and HTTP/2) are closed by `conn.rs`; hyper's header read timeout, a second
    // later, is the backstop for a request head that stops arriving on an HTTP/1.1 connection. HTTP/2 gets
    // keep-alive pings, so that a dead peer is dropped.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.idle_timeout + Duration::from_secs(1));
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEP_ALIVE.0)
        .keep_alive_timeout(H2_KEEP_ALIVE.1);
    let serving = Arc::new(Serving {
        builder,
        tls,
        deadlines: Deadlines {
            first_request: config.first_request_timeout,
            idle: config.idle_timeout,
        },
        io_timeout: config.io_timeout,
        metrics: Arc::clone(&metrics),
    });
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = &mut shutdown => break,
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            metrics.connection_refused();
            tracing::debug!(%peer, "connection refused: --max-connections are open");
            drop(stream);
            continue;
        };
        connections.spawn(Arc::clone(&serving).serve(
            stream,
            peer,
            handler.clone(),
            stopping.clone(),
            slot,
        ));
    }
    drop(listener);
    tracing::info!("shutting down: waiting for requests in flight");
    let _ = stop.send(true);
    let all_closed = async { while connections.join_next().await.is_some() {} };
    match tokio::time::timeout(config.shutdown_timeout, all_closed).await {
        Ok(()) => tracing::info!("all connections closed"),
        Err(_) => {
            tracing::warn!(
                timeout = ?config.shutdown_timeout,
                "requests still in flight at the shutdown timeout are dropped (unfinished puts do not commit)"
            );
            connections.shutdown().await;
        }
    }
    Ok(())
}

/// What serving one accepted connection needs.
struct Serving {
    builder: auto::Builder<TokioExecutor>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    deadlines: Deadlines,
    io_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Serving {
    /// Serves `stream` (TLS first, if configured) to its end with `handler`, holding its connection `_slot`.
    async fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        handler: Handler,
        stopping: watch::Receiver<bool>,
        _slot: OwnedSemaphorePermit,
    ) {
        let io = TimedIo::new(stream, self.io_timeout, Arc::clone(&self.metrics));
        self.metrics.connection_opened();
        match &self.tls {
            None => self.http(io, peer, handler, stopping).await,
            Some(acceptor) => match tls_handshake(acceptor, io).await {
                Ok(tls) => self.http(tls, peer, handler, stopping).await,
                Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            },
        }
        self.metrics.connection_ended();
    }

    /// Runs HTTP on `io` under the connection's deadlines (which start now, after any TLS handshake).
    async fn http<I>(
        &self,
        io: I,
        peer: SocketAddr,
        handler: Handler,
        stopping: watch::Receiver<bool>,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Activity::new();
        let handler = handler.for_connection(peer, Arc::clone(&activity));
        let conn = self.builder.serve_connection(TokioIo::new(io), handler);
        let (closed, result) = drive(
            conn,
            |c| c.graceful_shutdown(),
            &activity,
            self.deadlines,
            stopping,
        )
        .await;
        if let Some(why) = closed {
            tracing::debug!(%peer, reason = why.label(), "connection closed by the server");
            self.metrics.connection_closed(why);
        }
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

async fn tls_handshake<S>(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: S,
) -> io::Result<tokio_rustls::server::TlsStream<S>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
}
