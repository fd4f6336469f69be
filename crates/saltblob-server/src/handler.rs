//! [`Handler`], the request handler every connection serves with: it sheds requests beyond the cap, answers
//! CORS preflights (`cors/`), refuses what saltblob does not serve (`guard.rs`), counts the request body and
//! fails it when it stalls, frames `aws-chunked` bodies (`chunked.rs`), calls the S3 service, gives each response
//! its request id (and a browser's its bucket's CORS headers), and hands the response to its access log
//! (`access_log.rs`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Context;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body::Body as HttpBody;
use hyper::body::Incoming;
use s3s::StdError;
use s3s::config::{S3Config, StaticConfigProvider};
use s3s::service::{S3Service, S3ServiceBuilder};
use saltblob_core::{BlobStore, PriorityClass};
use tokio::sync::Semaphore;

use crate::access_log::{LoggedBody, RequestLog, logged};
use crate::auth::{Access, KeyAuth, RequestRecord};
use crate::body::{Passed, Watched, Watcher};
use crate::chunked::{BodyFailed, Fault, Reframe};
use crate::config::ServerConfig;
use crate::conn::{Activity, StallTimer};
use crate::cors::{self, BrowserRequest, CorsRules};
use crate::grants::Directory;
use crate::metrics::Metrics;
use crate::refusal::{Refusal, xml_escape};
use crate::service::SaltS3;
use crate::sse::rules::SseConfig;
use crate::upload_cap::UploadCap;
use crate::{chunked, guard};

/// Largest XML request body (DeleteObjects of 1000 keys of 1 KiB fits).
const XML_MAX_BODY: usize = 4 << 20;

/// The S3 service wrapped to refuse, shed, count, time and log each request.
#[derive(Clone)]
pub(crate) struct Handler {
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
    /// The buckets' CORS rules, for preflights and the answers to browsers.
    cors: Arc<CorsRules>,
}

impl Handler {
    /// The handler of a server with `config` on `store`, counting into `metrics`.
    pub(crate) fn new(config: &ServerConfig, store: BlobStore, metrics: Arc<Metrics>) -> Self {
        let cors = Arc::new(CorsRules::new(store.clone()));
        Self {
            default_class: store.default_class(),
            service: s3_service(config, store, Arc::clone(&cors)),
            cors,
            metrics,
            peer: None,
            requests: Arc::new(Semaphore::new(config.max_requests.max(1))),
            activity: None,
            io_timeout: config.io_timeout,
        }
    }

    /// The handler of one connection, from `peer`, whose requests `activity` follows.
    pub(crate) fn for_connection(&self, peer: SocketAddr, activity: Arc<Activity>) -> Self {
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
        if req.method() == Method::OPTIONS {
            // A browser's preflight: unsigned, answered from the bucket's CORS rules before anything else (but
            // the cap: it reads the store too).
            log.record.set_op("PreflightCors");
            let response = match self.admit(&mut log) {
                Some(refusal) => refusal_response(&refusal, &request_id),
                None => match cors::preflight(&self.cors, &req).await {
                    Ok(headers) => {
                        let mut response = Response::new(s3s::Body::empty());
                        response.headers_mut().extend(headers);
                        response
                    }
                    Err(refusal) => refusal_response(&refusal, &request_id),
                },
            };
            return self.finish(response, log, &request_id, http1 && unread_body);
        }
        let browser = BrowserRequest::of(&req);
        let refusal =
            guard::check(req.method(), req.uri(), req.headers()).or_else(|| self.admit(&mut log));
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
        if let Some(browser) = browser {
            browser.answer(&self.cors, response.headers_mut()).await;
        }
        self.finish(response, log, &request_id, http1 && close)
    }

    /// Takes a permit of the request cap for the request `log` logs (it holds it until its response ends); when
    /// none is left, the request is shed: `503 SlowDown`.
    fn admit(&self, log: &mut RequestLog) -> Option<Refusal> {
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
    }

    /// `response` given its request id (and `Connection: close` if `close`), logged by `log` when it ends.
    fn finish(
        &self,
        mut response: Response<s3s::Body>,
        mut log: RequestLog,
        request_id: &str,
        close: bool,
    ) -> Response<LoggedBody> {
        log.status = response.status().as_u16();
        if let Ok(id) = HeaderValue::from_str(request_id) {
            response.headers_mut().insert("x-amz-request-id", id);
        }
        if close {
            response
                .headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        response.map(|body| logged(body, log))
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
        let counting = Counting {
            count: bytes_in,
            stall: StallTimer::new(self.io_timeout),
            fault: fault.clone(),
            ended: Arc::clone(&ended),
        };
        let req = req.map(|body| {
            let counted = Watched::new(body, counting);
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

impl hyper::service::Service<Request<Incoming>> for Handler {
    type Response = Response<LoggedBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let handler = self.clone();
        Box::pin(async move { Ok(handler.handle(req).await) })
    }
}

/// The s3s service: our operations (with the buckets' `cors` rules), our access keys and access check.
fn s3_service(config: &ServerConfig, store: BlobStore, cors: Arc<CorsRules>) -> S3Service {
    let sse = SseConfig::new(
        &store,
        config.sse_s3_key.clone(),
        config.sse_kms_key.clone(),
        config.tls.is_some() || config.sse_c_over_http,
    );
    let uploads = UploadCap::new(config.max_uploads_per_bucket);
    let stored_keys = Arc::new(Directory::new(store.clone()));
    let access = Access {
        anonymous_read: config.anonymous_read.clone(),
        anonymous_list: config.anonymous_list.clone(),
        root: config.credentials.clone(),
        stored: Arc::clone(&stored_keys),
        store: store.clone(),
    };
    let mut builder = S3ServiceBuilder::new(SaltS3::new(
        store,
        config.region.clone(),
        uploads,
        sse,
        Arc::clone(&stored_keys),
        cors,
    ));
    builder.set_auth(KeyAuth {
        root: config.credentials.clone(),
        stored: stored_keys,
    });
    builder.set_access(access);
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

/// The [`Watcher`] of a request body: counts the bytes it yields and fails it when the client sends nothing
/// for the IO timeout while it is being read (`400 RequestTimeout`, recorded in `fault`).
struct Counting {
    count: Arc<AtomicU64>,
    /// Runs while a read waits for the client.
    stall: StallTimer,
    fault: Fault,
    /// Set once the body has been read to its end.
    ended: Arc<AtomicBool>,
}

impl Watcher for Counting {
    fn waiting(&mut self, cx: &mut Context<'_>) -> Option<StdError> {
        if self.stall.stalled(cx).is_pending() {
            return None;
        }
        self.fault.set(Refusal::new(
            "RequestTimeout",
            StatusCode::BAD_REQUEST,
            "Your socket connection to the server was not read from or written to within the \
             timeout period. Idle connections will be closed.",
        ));
        Some(Box::new(BodyFailed("the request body stopped arriving")))
    }

    fn passed(&mut self, passed: Passed, end_stream: bool) {
        self.stall.progress();
        if let Passed::Frame(len) = passed {
            self.count.fetch_add(len, Ordering::Relaxed);
        }
        if passed == Passed::End || end_stream {
            self.ended.store(true, Ordering::Relaxed);
        }
    }
}
