//! [`run`]: the accept loop (plain or TLS) under the connection cap, HTTP/1.1 and HTTP/2 connections driven
//! under their deadlines (`conn.rs`), graceful shutdown, the metrics listener and periodic gc; and [`Handler`],
//! which refuses what saltblob does not serve (`guard.rs`), sheds requests beyond the cap, frames `aws-chunked`
//! bodies (`chunked.rs`), and wraps the S3 service to count, time and log each request.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use s3s::config::{S3Config, StaticConfigProvider};
use s3s::service::{S3Service, S3ServiceBuilder};
use saltblob_core::{BlobStore, GcOptions, PriorityClass};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::ServerConfig;
use crate::auth::{Access, KeyAuth, RequestRecord};
use crate::chunked::{BodyFailed, Fault, Reframe};
use crate::conn::{Activity, Deadlines, StallTimer, TimedIo, drive};
use crate::metrics::{Finished, Metrics};
use crate::multipart::sweep_expired_uploads;
use crate::refusal::{Refusal, xml_escape};
use crate::service::SaltS3;
use crate::{chunked, guard};

/// How long a TLS handshake may take before the connection is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest XML request body (DeleteObjects of 1000 keys of 1 KiB fits).
const XML_MAX_BODY: usize = 4 << 20;
/// Interval of HTTP/2 keep-alive pings, and how long a ping may go unanswered before the connection closes.
const H2_KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(20));
/// Connections the metrics listener serves at once (more are closed at once).
const METRICS_MAX_CONNECTIONS: usize = 16;

/// Serves S3 on `listener` (and, if configured, metrics on `config.metrics_listener`) from `store` until
/// `shutdown` completes; then stops accepting, lets the requests in flight finish for up to
/// [`ServerConfig::shutdown_timeout`], and returns. A put whose body had not ended by then is dropped before
/// its commit: nothing of it becomes visible.
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
    let handler = Handler {
        service: s3_service(&config, store.clone()),
        metrics: Arc::clone(&metrics),
        peer: None,
        default_class: store.default_class(),
        requests: Arc::new(Semaphore::new(config.max_requests.max(1))),
        activity: None,
        io_timeout: config.io_timeout,
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
    let (stop, stopping) = watch::channel(false);
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
    let store_encryption = store.config().encryption.as_ref();
    let s3_key = config
        .sse_s3_key
        .clone()
        .or_else(|| store_encryption.and_then(|e| e.key.clone()));
    let sse = crate::sse::rules::SseConfig {
        provider: store_encryption.is_some(),
        kms_key: config.sse_kms_key.clone().or_else(|| s3_key.clone()),
        s3_key,
        customer_keys: config.tls.is_some() || config.sse_c_over_http,
        defaults: crate::lifecycle::Cache::default(),
    };
    let mut builder = S3ServiceBuilder::new(SaltS3 {
        store,
        region: config.region.clone(),
        uploads: crate::multipart::cap::UploadCap::new(config.max_uploads_per_bucket),
        lifecycles: crate::lifecycle::Cache::default(),
        sse,
    });
    builder.set_auth(KeyAuth(config.credentials.clone()));
    builder.set_access(Access {
        anonymous_read: config.anonymous_read.clone(),
        anonymous_list: config.anonymous_list.clone(),
    });
    let mut s3_config = S3Config::default();
    s3_config.xml_max_body_size = XML_MAX_BODY;
    // POST object (browser forms) is refused before s3s (`guard.rs`); should one get through, s3s buffers
    // nothing of it.
    s3_config.post_object_max_file_size = 0;
    s3_config.form_max_field_size = 0;
    s3_config.form_max_fields_size = 0;
    s3_config.form_max_parts = 0;
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
/// whose parts' lease has passed (`multipart/`) and the objects their bucket's lifecycle expired
/// (`lifecycle/`).
async fn gc_loop(store: BlobStore, every: Duration, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut expirer = crate::lifecycle::Expirer::new();
    loop {
        tick.tick().await;
        match sweep_expired_uploads(&store).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(uploads = n, "removed expired multipart uploads"),
            Err(e) => {
                tracing::warn!(error = %e, "sweeping expired multipart uploads failed (will retry)")
            }
        }
        match expirer.pass(&store).await {
            Ok(expired) => {
                if expired.objects > 0 {
                    tracing::info!(
                        objects = expired.objects,
                        bytes = expired.bytes,
                        "deleted objects expired by their bucket's lifecycle"
                    );
                }
                metrics.lifecycle_expired(expired.objects);
            }
            Err(e) => tracing::warn!(error = %e, "the lifecycle pass failed (will retry)"),
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

/// Serves `GET /metrics` on `listener` (HTTP/1.1) until aborted: at most [`METRICS_MAX_CONNECTIONS`] at once,
/// each with `header_timeout` to send a request head (and to stay idle between requests) and `io_timeout` for
/// a stalled write.
async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    store: BlobStore,
    header_timeout: Duration,
    io_timeout: Duration,
) {
    let slots = Arc::new(Semaphore::new(METRICS_MAX_CONNECTIONS));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a metrics connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let metrics_for_service = Arc::clone(&metrics);
        let store = store.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let response = if req.method() == Method::GET && req.uri().path() == "/metrics" {
                let text = metrics_for_service.render(&store.scheduler_stats(), store.read_ahead());
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
        let io = TimedIo::new(stream, io_timeout, Arc::clone(&metrics));
        let conn = builder.serve_connection(TokioIo::new(io), service);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "metrics connection ended with an error");
            }
            drop(slot);
        });
    }
}

/// A new request id: 16 upper-case hex digits, as AWS's `x-amz-request-id`, unique within the process and
/// unlikely to repeat across restarts.
fn new_request_id() -> String {
    static SEED: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        now ^ u64::from(std::process::id()).rotate_left(32)
    });
    // splitmix64 of the counter: distinct ids that do not look sequential.
    let mut x = seed.wrapping_add(
        NEXT.fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    format!("{:016X}", x ^ (x >> 31))
}

/// The S3 service wrapped to refuse, shed, count, time and log each request.
#[derive(Clone)]
struct Handler {
    service: S3Service,
    metrics: Arc<Metrics>,
    peer: Option<SocketAddr>,
    /// The class of a request that reads or writes no blob (a bucket operation, a listing, a HEAD): the store's
    /// default class, else `interactive` ([`BlobStore::default_class`]), as the store runs it.
    default_class: PriorityClass,
    /// One permit per request in flight ([`ServerConfig::max_requests`]).
    requests: Arc<Semaphore>,
    /// The connection's requests, for its deadlines.
    activity: Option<Arc<Activity>>,
    /// How long a request body may stop arriving.
    io_timeout: Duration,
}

impl Handler {
    fn for_connection(&self, peer: SocketAddr, activity: Arc<Activity>) -> Self {
        Self {
            peer: Some(peer),
            activity: Some(activity),
            ..self.clone()
        }
    }

    async fn handle(self, mut req: Request<Incoming>) -> Response<LoggedBody> {
        let request_id = new_request_id();
        let record = Arc::new(RequestRecord::default());
        record.set_class(self.default_class.clone());
        req.extensions_mut().insert(Arc::clone(&record));
        let bytes_in = Arc::new(AtomicU64::new(0));
        let chunk_signatures = Arc::new(AtomicU64::new(0));
        if let Some(activity) = &self.activity {
            activity.request_started();
        }
        let mut log = RequestLog {
            start: Instant::now(),
            record,
            metrics: Arc::clone(&self.metrics),
            peer: self.peer,
            method: req.method().clone(),
            path: req.uri().path().to_owned(),
            request_id: request_id.clone(),
            bytes_in: Arc::clone(&bytes_in),
            bytes_out: 0,
            payload: chunked::payload_name(req.headers()),
            chunk_signatures: Arc::clone(&chunk_signatures),
            // Until a response exists: the client went away first.
            status: 499,
            completed: false,
            activity: self.activity.clone(),
            _permit: None,
        };
        self.metrics.started();
        // HTTP/1.1 must close a connection whose request body is left unread (HTTP/2 resets the stream).
        let http1 = req.version() < Version::HTTP_2;
        let unread_body = !req.body().is_end_stream();
        let refusal = guard::check(req.method(), req.uri(), req.headers()).or_else(|| {
            match Arc::clone(&self.requests).try_acquire_owned() {
                Ok(permit) => {
                    log._permit = Some(permit);
                    None
                }
                Err(_) => {
                    self.metrics.request_shed();
                    Some(Refusal::new(
                        "SlowDown",
                        StatusCode::SERVICE_UNAVAILABLE,
                        "Please reduce your request rate.",
                    ))
                }
            }
        });
        let (response, close) = match refusal {
            Some(refusal) => {
                tracing::debug!(code = refusal.code, header = ?refusal.header, "request refused");
                (refusal_response(&refusal, &request_id), unread_body)
            }
            None => {
                self.serve(req, &request_id, bytes_in, chunk_signatures)
                    .await
            }
        };
        let mut response = response;
        log.status = response.status().as_u16();
        if let Ok(id) = HeaderValue::from_str(&request_id) {
            response.headers_mut().insert("x-amz-request-id", id);
        }
        if http1 && close {
            response
                .headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        response.map(|body| LoggedBody {
            inner: Box::pin(body),
            log: Some(log),
        })
    }

    /// Runs `req` through s3s, its body counted, timed and (if `aws-chunked`) framed, its chunk signatures
    /// counted in `chunk_signatures`; returns the response and whether its connection is to be closed after it:
    /// also when the operation answered without reading the body to its end (a PUT to a missing bucket, a
    /// refused part): hyper then closes the connection, and a client told so in the response (`Connection:
    /// close`) does not send its next request on it (urllib3, under boto3, did, and got a dropped connection).
    async fn serve(
        &self,
        req: Request<Incoming>,
        request_id: &str,
        bytes_in: Arc<AtomicU64>,
        chunk_signatures: Arc<AtomicU64>,
    ) -> (Response<s3s::Body>, bool) {
        let close_after = empty_body_expects_continue(&req);
        let has_body = !req.body().is_end_stream();
        let ended = Arc::new(AtomicBool::new(false));
        let fault = Fault::default();
        let framing = chunked::mode(req.headers());
        let timeout = self.io_timeout;
        let req = req.map(|body| {
            let counted = Counting {
                inner: Box::pin(body),
                count: bytes_in,
                stall: StallTimer::new(timeout),
                fault: fault.clone(),
                ended: Arc::clone(&ended),
            };
            match framing {
                Some(mode) => s3s::Body::http_body(Reframe::new(
                    counted,
                    mode,
                    fault.clone(),
                    chunk_signatures,
                )),
                None => s3s::Body::http_body(counted),
            }
        });
        let response = match crate::object::call(&self.service, req).await {
            Ok(response) => response,
            Err(e) => {
                tracing::error!(error = ?e, "the S3 service failed");
                let mut response = Response::new(s3s::Body::empty());
                *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                response
            }
        };
        match fault.take() {
            // The body failed: its error, not what the operation made of the failure.
            Some(refusal) if !response.status().is_success() => {
                tracing::debug!(code = refusal.code, "request body refused");
                (refusal_response(&refusal, request_id), true)
            }
            _ => {
                let unread = has_body && !ended.load(Ordering::Relaxed);
                (with_request_id(response, request_id), close_after || unread)
            }
        }
    }
}

/// The error response of `refusal`.
fn refusal_response(refusal: &Refusal, request_id: &str) -> Response<s3s::Body> {
    let mut response = Response::new(s3s::Body::from(refusal.xml(request_id)));
    *response.status_mut() = refusal.status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    response
}

/// `response` with `<RequestId>` added to its error document, if it is one that has none.
fn with_request_id(mut response: Response<s3s::Body>, request_id: &str) -> Response<s3s::Body> {
    if response.status().is_success() {
        return response;
    }
    let Some(body) = response.body().bytes() else {
        return response;
    };
    const END: &[u8] = b"</Error>";
    let has_id = body.windows(11).any(|w| w == b"<RequestId>");
    let Some(at) = body.windows(END.len()).rposition(|w| w == END) else {
        return response;
    };
    if has_id {
        return response;
    }
    let id = format!("<RequestId>{}</RequestId>", xml_escape(request_id));
    let mut out = Vec::with_capacity(body.len() + id.len());
    out.extend_from_slice(&body[..at]);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(&body[at..]);
    response.headers_mut().remove(http::header::CONTENT_LENGTH);
    *response.body_mut() = s3s::Body::from(out);
    response
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

/// A request body that counts the bytes it yields and fails when the client sends nothing for `timeout`
/// while it is being read (`400 RequestTimeout`, recorded in `fault`).
struct Counting {
    inner: Pin<Box<Incoming>>,
    count: Arc<AtomicU64>,
    /// Runs while a read waits for the client.
    stall: StallTimer,
    fault: Fault,
    /// Set once the body has been read to its end.
    ended: Arc<AtomicBool>,
}

impl HttpBody for Counting {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = match self.inner.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                if self.stall.stalled(cx).is_pending() {
                    return Poll::Pending;
                }
                self.fault.set(Refusal::new(
                    "RequestTimeout",
                    StatusCode::BAD_REQUEST,
                    "Your socket connection to the server was not read from or written to within the \
                     timeout period. Idle connections will be closed.",
                ));
                return Poll::Ready(Some(Err(Box::new(BodyFailed(
                    "the request body stopped arriving",
                )))));
            }
        };
        self.stall.progress();
        if let Some(Ok(frame)) = &frame
            && let Some(data) = frame.data_ref()
        {
            self.count.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        if frame.is_none() || self.inner.is_end_stream() {
            self.ended.store(true, Ordering::Relaxed);
        }
        Poll::Ready(frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What is known of one request, counted and logged once when dropped: at the end of its response body, or
/// when the client went away. A response cut off before its end (the client left, a write stalled, the body
/// failed) is counted and logged as aborted, with status 499.
struct RequestLog {
    start: Instant,
    record: Arc<RequestRecord>,
    metrics: Arc<Metrics>,
    peer: Option<SocketAddr>,
    method: Method,
    path: String,
    request_id: String,
    bytes_in: Arc<AtomicU64>,
    bytes_out: u64,
    /// How the body was sent (`x-amz-content-sha256`, as [`chunked::payload_name`] names it).
    payload: &'static str,
    /// The `aws-chunked` chunk headers that carried a signature (each checked by s3s).
    chunk_signatures: Arc<AtomicU64>,
    /// The response's status; 499 until there is one.
    status: u16,
    /// Whether the response was sent to its end.
    completed: bool,
    activity: Option<Arc<Activity>>,
    /// The request's place among those in flight.
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        if let Some(activity) = &self.activity {
            activity.request_ended();
        }
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
        let aborted = !self.completed;
        let status = if aborted { 499 } else { self.status };
        self.metrics.finished(&Finished {
            op,
            class: &class,
            status,
            duration,
            bytes_in,
            bytes_out: self.bytes_out,
        });
        tracing::info!(
            target: "saltblob_server::access",
            op,
            bucket = fields.bucket.as_deref().unwrap_or("-"),
            key = fields.key.as_deref().unwrap_or("-"),
            status,
            aborted,
            response_status = self.status,
            bytes_in,
            bytes_out = self.bytes_out,
            payload = self.payload,
            chunk_signatures = self.chunk_signatures.load(Ordering::Relaxed),
            duration_ms = duration.as_secs_f64() * 1000.0,
            class = class.name(),
            access_key = fields.access_key.as_deref().unwrap_or("-"),
            method = %self.method,
            path = %self.path,
            peer = %self.peer.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            request_id = %self.request_id,
            "request"
        );
    }
}

/// A response body that counts the bytes sent and ends its request's [`RequestLog`] with itself.
struct LoggedBody {
    inner: Pin<Box<s3s::Body>>,
    log: Option<RequestLog>,
}

impl LoggedBody {
    /// The response was sent whole: its log says so when it is dropped.
    fn complete(&mut self) {
        if let Some(log) = &mut self.log {
            log.completed = true;
        }
    }
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
            Poll::Ready(None) => {
                self.complete();
                drop(self.log.take());
            }
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

impl Drop for LoggedBody {
    fn drop(&mut self) {
        // hyper sends no body for HEAD, 204 and 304, and stops polling a body that says it has ended.
        let bodiless = self.log.as_ref().is_some_and(|log| {
            log.method == Method::HEAD || matches!(log.status, 204 | 304) || log.status < 200
        });
        if bodiless || self.inner.is_end_stream() {
            self.complete();
        }
    }
}
