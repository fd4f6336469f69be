//! [`run`]: the accept loop (plain or TLS), HTTP/1.1 and HTTP/2 connections, graceful shutdown, the metrics
//! listener and periodic gc; and [`Handler`], which wraps the S3 service to count, time and log each request.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use s3s::config::{S3Config, StaticConfigProvider};
use s3s::service::{S3Service, S3ServiceBuilder};
use saltblob_core::{BlobStore, GcOptions, PriorityClass};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::ServerConfig;
use crate::auth::{Access, KeyAuth, RequestRecord};
use crate::metrics::{Finished, Metrics};
use crate::multipart::sweep_expired_uploads;
use crate::service::SaltS3;

/// How long a TLS handshake may take before the connection is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest XML request body (DeleteObjects of 1000 keys of 1 KiB fits).
const XML_MAX_BODY: usize = 4 << 20;

/// Serves S3 on `listener` (and, if configured, metrics on `config.metrics_listener`) from `store` until
/// `shutdown` completes; then stops accepting, lets the requests in flight finish for up to
/// [`ServerConfig::shutdown_timeout`], and returns. A put whose body had not ended by then is dropped before
/// its commit: nothing of it becomes visible.
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
    let handler = Handler {
        service: s3_service(&config, store.clone()),
        metrics: Arc::clone(&metrics),
        peer: None,
        default_class: store.default_class(),
    };
    let _gc = config.gc_every.map(|every| {
        Aborting(tokio::spawn(gc_loop(
            store.clone(),
            every,
            Arc::clone(&metrics),
        )))
    });
    let _metrics_server = config.metrics_listener.take().map(|l| {
        Aborting(tokio::spawn(serve_metrics(
            l,
            Arc::clone(&metrics),
            store.clone(),
        )))
    });
    let tls = config.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let mut connections = auto::Builder::new(TokioExecutor::new());
    // A timer enables hyper's header read timeout (30 s), so that a client that never finishes its headers
    // does not hold a connection forever.
    connections.http1().timer(TokioTimer::new());
    connections.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
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
            () = &mut shutdown => break,
        };
        let handler = handler.for_peer(peer);
        match &tls {
            None => {
                let conn = connections.serve_connection(TokioIo::new(stream), handler);
                let conn = graceful.watch(conn.into_owned());
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let connections = connections.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let stream = match tls_handshake(&acceptor, stream).await {
                        Ok(stream) => stream,
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                    };
                    let conn = connections.serve_connection(TokioIo::new(stream), handler);
                    if let Err(e) = watcher.watch(conn.into_owned()).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
        }
    }
    drop(listener);
    tracing::info!("shutting down: waiting for requests in flight");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(config.shutdown_timeout) => tracing::warn!(
            timeout = ?config.shutdown_timeout,
            "requests still in flight at the shutdown timeout are dropped (unfinished puts do not commit)"
        ),
    }
    Ok(())
}

async fn tls_handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: TcpStream,
) -> io::Result<tokio_rustls::server::TlsStream<TcpStream>> {
    tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
}

/// Reads a TLS certificate chain and private key from PEM files.
///
/// # Errors
/// `InvalidInput` naming the file when it cannot be read, holds no certificate or key, or they do not match.
pub fn load_tls(cert: &Path, key: &Path) -> io::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let invalid = |path: &Path, what: String| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: {what}", path.display()),
        )
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(cert, format!("cannot read a PEM certificate chain: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(cert, "no certificate in the file".to_owned()));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| invalid(key, format!("cannot read a PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map_err(|e| invalid(key, format!("the key does not suit the certificate: {e}")))?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(tls))
}

/// The s3s service: our operations, our access keys and access check.
fn s3_service(config: &ServerConfig, store: BlobStore) -> S3Service {
    let mut builder = S3ServiceBuilder::new(SaltS3 {
        store,
        region: config.region.clone(),
        uploads: crate::multipart::UploadCap::new(config.max_uploads_per_bucket),
    });
    builder.set_auth(KeyAuth::new(&config.credentials));
    builder.set_access(Access {
        anonymous_read: config.anonymous_read.clone(),
    });
    let mut s3_config = S3Config::default();
    s3_config.xml_max_body_size = XML_MAX_BODY;
    // POST object (browser forms) is not supported; s3s would buffer its file before the access check.
    s3_config.post_object_max_file_size = 0;
    builder.set_config(Arc::new(StaticConfigProvider::new(Arc::new(s3_config))));
    builder.build()
}

/// A background task, aborted when dropped.
struct Aborting(JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs gc on `store` every `every`, recording each pass in `metrics`, after removing the multipart uploads
/// whose parts' lease has passed (`multipart/`).
async fn gc_loop(store: BlobStore, every: Duration, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match sweep_expired_uploads(&store).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(uploads = n, "removed expired multipart uploads"),
            Err(e) => {
                tracing::warn!(error = %e, "sweeping expired multipart uploads failed (will retry)")
            }
        }
        match store.gc(&GcOptions::new()).await {
            Ok(report) => {
                tracing::info!(
                    reclaimed_versions = report.reclaim.versions,
                    reclaimed_chunks = report.reclaim.chunks,
                    reclaimed_bytes = report.reclaim.bytes,
                    abandoned_puts = report.abandoned_puts,
                    puts_in_flight = report.puts_in_flight,
                    "gc pass"
                );
                metrics.gc_ran(Some(&report));
            }
            Err(e) => {
                tracing::warn!(error = %e, "gc pass failed (will retry)");
                metrics.gc_ran(None);
            }
        }
    }
}

/// Serves `GET /metrics` on `listener` (HTTP/1.1) until aborted.
async fn serve_metrics(listener: TcpListener, metrics: Arc<Metrics>, store: BlobStore) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a metrics connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = Arc::clone(&metrics);
        let store = store.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let response = if req.method() == Method::GET && req.uri().path() == "/metrics" {
                let text = metrics.render(&store.scheduler_stats());
                Response::builder()
                    .header(
                        http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )
                    .body(Full::new(Bytes::from(text)))
            } else {
                Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(Full::new(Bytes::from_static(
                        b"only /metrics is served here\n",
                    )))
            };
            async move { response }
        });
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "metrics connection ended with an error");
            }
        });
    }
}

/// The S3 service wrapped to count, time and log each request.
#[derive(Clone)]
struct Handler {
    service: S3Service,
    metrics: Arc<Metrics>,
    peer: Option<SocketAddr>,
    /// The class of a request that reads or writes no blob (a bucket operation, a listing, a HEAD): the store's
    /// default class, else `interactive` ([`BlobStore::default_class`]), as the store runs it.
    default_class: PriorityClass,
}

impl Handler {
    fn for_peer(&self, peer: SocketAddr) -> Self {
        Self {
            peer: Some(peer),
            ..self.clone()
        }
    }

    async fn handle(self, mut req: Request<Incoming>) -> Response<LoggedBody> {
        let record = Arc::new(RequestRecord::default());
        record.set_class(self.default_class.clone());
        req.extensions_mut().insert(Arc::clone(&record));
        let bytes_in = Arc::new(AtomicU64::new(0));
        let mut log = RequestLog {
            start: Instant::now(),
            record,
            metrics: Arc::clone(&self.metrics),
            peer: self.peer,
            method: req.method().clone(),
            path: req.uri().path().to_owned(),
            bytes_in: Arc::clone(&bytes_in),
            bytes_out: 0,
            // Until a response exists: the client went away first.
            status: 499,
        };
        self.metrics.started();
        let close_after = empty_body_expects_continue(&req);
        let req = req.map(|body| {
            s3s::Body::http_body(Counting {
                inner: Box::pin(body),
                count: bytes_in,
            })
        });
        let response = match self.service.call(req).await {
            Ok(response) => response,
            Err(e) => {
                tracing::error!(error = ?e, "the S3 service failed");
                let mut response = Response::new(s3s::Body::empty());
                *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                response
            }
        };
        log.status = response.status().as_u16();
        let mut response = response;
        if close_after {
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        response.map(|body| LoggedBody {
            inner: Box::pin(body),
            log: Some(log),
        })
    }
}

/// Whether `req` asks for `100 Continue` with an empty body (`Content-Length: 0`), as botocore (boto3, awscli)
/// does for every PUT of an empty object. hyper rightly answers such a request without `100 Continue` (there is
/// no body to wait for), but botocore then misreads the next response on that connection and stalls until its
/// read timeout (boto/botocore#3755). The server closes such a connection after its response, so that the client
/// opens a fresh one.
fn empty_body_expects_continue<B>(req: &Request<B>) -> bool {
    let headers = req.headers();
    let expects = headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let empty = headers
        .get(http::header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() == b"0");
    expects && empty
}

impl hyper::service::Service<Request<Incoming>> for Handler {
    type Response = Response<LoggedBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let handler = self.clone();
        Box::pin(async move { Ok(handler.handle(req).await) })
    }
}

/// A request body that counts the bytes it yields.
struct Counting {
    inner: Pin<Box<Incoming>>,
    count: Arc<AtomicU64>,
}

impl HttpBody for Counting {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = self.inner.as_mut().poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &frame
            && let Some(data) = frame.data_ref()
        {
            self.count.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What is known of one request, counted and logged once when dropped: at the end of its response body, or
/// when the client went away.
struct RequestLog {
    start: Instant,
    record: Arc<RequestRecord>,
    metrics: Arc<Metrics>,
    peer: Option<SocketAddr>,
    method: Method,
    path: String,
    bytes_in: Arc<AtomicU64>,
    bytes_out: u64,
    status: u16,
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let fields = self.record.fields();
        let op = if fields.op.is_empty() {
            "Unknown"
        } else {
            fields.op.as_str()
        };
        // Every request has a class: the handler's default until a blob's read or write sets its own.
        let class = fields.class.unwrap_or_else(PriorityClass::interactive);
        let duration = self.start.elapsed();
        let bytes_in = self.bytes_in.load(Ordering::Relaxed);
        self.metrics.finished(&Finished {
            op,
            class: &class,
            status: self.status,
            duration,
            bytes_in,
            bytes_out: self.bytes_out,
        });
        tracing::info!(
            target: "saltblob_server::access",
            op,
            bucket = fields.bucket.as_deref().unwrap_or("-"),
            key = fields.key.as_deref().unwrap_or("-"),
            status = self.status,
            bytes_in,
            bytes_out = self.bytes_out,
            duration_ms = duration.as_secs_f64() * 1000.0,
            class = class.name(),
            access_key = fields.access_key.as_deref().unwrap_or("-"),
            method = %self.method,
            path = %self.path,
            peer = %self.peer.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            "request"
        );
    }
}

/// A response body that counts the bytes sent and ends its request's [`RequestLog`] with itself.
struct LoggedBody {
    inner: Pin<Box<s3s::Body>>,
    log: Option<RequestLog>,
}

impl HttpBody for LoggedBody {
    type Data = Bytes;
    type Error = s3s::StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, s3s::StdError>>> {
        let frame = self.inner.as_mut().poll_frame(cx);
        match &frame {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, Bytes::len) as u64;
                if let Some(log) = &mut self.log {
                    log.bytes_out += len;
                }
            }
            Poll::Ready(None) => drop(self.log.take()),
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
