//! # saltblob-server
//!
//! An S3-compatible server on a [`BlobStore`], so that S3 tools and SDKs (awscli, boto3, rclone, …) use saltblob
//! unchanged: `saltblob serve --listen 127.0.0.1:9000 --store URL`. The S3 protocol (request parsing, XML, SigV4
//! header and presigned-URL authentication, `aws-chunked` bodies) is the `s3s` crate's; connections are hyper's.
//! Buckets and objects live in the store's one key space (`docs/s3.md` states the mapping).
//!
//! ```no_run
//! # async fn example(store: saltblob_core::BlobStore) -> std::io::Result<()> {
//! use saltblob_server::{AccessKey, ServerConfig};
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9000").await?;
//! let config = ServerConfig::new(vec![AccessKey::new("AKID", "SECRET")]);
//! // Serves until the future completes (the CLI's waits for SIGINT or SIGTERM).
//! let shutdown = std::future::pending::<()>();
//! saltblob_server::run(listener, config, store, shutdown).await
//! # }
//! ```
//!
//! # Layout
//! Each module uses only those listed before it (a request's path runs up this list from `serve.rs`).
//! - `keys.rs`: buckets and object keys in the store's key space.
//! - `error.rs`: saltblob's errors as S3 errors.
//! - `refusal.rs`: a request refused before s3s sees it, and its error document.
//! - `guard.rs`: the requests saltblob refuses (SigV2, presigned bounds, features it does not have, …), checked
//!   before s3s sees a request.
//! - `auth.rs`: access keys (a [`KeyRing`] that can be replaced while serving), their secrets for SigV4,
//!   anonymous reads and listings per bucket, the request record (with the priority class the access log and
//!   the latency histogram name).
//! - `metrics.rs`: the Prometheus metrics.
//! - `chunked.rs`: `aws-chunked` request bodies framed before s3s decodes them (unsigned chunks streamed,
//!   signed ones capped).
//! - `conn.rs`: connection limits: the first-request and idle deadlines, the write stall timeout.
//! - `body.rs`: request bodies read as an `AsyncRead` that verifies Content-MD5 and `x-amz-checksum-*` at its
//!   end; blob streams as response bodies; HTTP bodies watched as their frames pass.
//! - `attrs.rs`: an object's S3 attributes in its manifest (ETag, Last-Modified, checksums, user metadata,
//!   stored headers), the conditional headers checked against them, a copy's source.
//! - `cache.rs`: a bucket setting read lately, kept for a moment.
//! - `lifecycle/`: bucket lifecycle rules: their record, when they expire an object, the expiry pass.
//! - `sse/`: server-side encryption: each request's choice, made once from its headers (the key a put seals
//!   under: its headers, the bucket's default, the server's keys; SSE-C), what responses say about it, the
//!   buckets' default encryption records.
//! - `put_body.rs`: the one path a body takes into the store (PutObject, CopyObject, UploadPart,
//!   UploadPartCopy): the checks an S3 input asks for, the verified reader that records the ETag and checksums
//!   before the commit, the write sealed as the request's encryption says, and its one outcome.
//! - `upload_cap.rs`: the cap on multipart uploads in progress per bucket.
//! - `service.rs`: `SaltS3`, the service's state (holding what the modules above keep), and the store checks
//!   handlers share (the bucket check with its lifecycle, a conditional put's condition, the class a request
//!   is labelled with).
//! - `settings.rs`: the bucket and object settings saltblob does not keep, answered as AWS does.
//! - `list.rs`: ListObjects v1 and v2, ListObjectVersions.
//! - `object/`: object operations: put, get, head, delete, copy.
//! - `multipart/`: multipart upload; its records and their typed state, the part, complete and abort protocol,
//!   the sweep.
//! - `bucket/`: bucket operations, and the bucket settings saltblob keeps (lifecycle rules, default
//!   encryption).
//! - `s3.rs`: dispatch: the `s3s::S3` implementation, each operation a call to its handler.
//! - `access_log.rs`: each request's access-log line and metrics, written when its response ends.
//! - `handler.rs`: the request handler: refuses (`guard.rs`), sheds requests beyond the cap, counts and frames
//!   request bodies (`aws-chunked`), calls the S3 service, gives each response its request id.
//! - `background.rs`: the tasks beside the accept loop: periodic upkeep (upload sweep, lifecycle pass, gc),
//!   the metrics listener.
//! - `serve.rs`: [`run`]: the accept loop under the connection cap, TLS, graceful shutdown.

mod access_log;
mod attrs;
mod auth;
mod background;
mod body;
mod bucket;
mod cache;
mod chunked;
mod conn;
mod error;
mod guard;
mod handler;
mod keys;
mod lifecycle;
mod list;
mod metrics;
mod multipart;
mod object;
mod put_body;
mod refusal;
mod s3;
mod serve;
mod service;
mod settings;
mod sse;
mod upload_cap;

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use saltblob_core::BlobStore;
use tokio::net::TcpListener;

pub use crate::auth::{AccessKey, KeyRing, parse_credentials};
pub use crate::bucket::{check_bucket_name, create_bucket};
pub use crate::chunked::{MAX_SIGNED_CHUNK, REFRAME_MAX};
pub use crate::keys::{
    BUCKET_PREFIX, ENCRYPTION_PREFIX, LIFECYCLE_PREFIX, MULTIPART_PREFIX, OBJECT_PREFIX,
};
pub use crate::lifecycle::{Expired, Expirer, expire_objects};
pub use crate::multipart::{
    DEFAULT_MAX_UPLOADS_PER_BUCKET, FINISHED_KEPT, PART_LEASE, UPLOAD_IDLE_EXPIRY,
};
pub use crate::serve::{load_tls, run};

/// How the server runs; [`ServerConfig::new`] gives the defaults. `docs/s3.md`, *Limits*, explains each limit.
#[must_use]
pub struct ServerConfig {
    /// The access keys accepted (SigV4). At least one is required: [`run`] refuses to start without. The
    /// running server reads them through this handle, so [`KeyRing::replace`] changes them while it serves.
    pub credentials: KeyRing,
    /// Buckets whose objects anyone may read without signing (GetObject, HeadObject, HeadBucket). Defaults to
    /// none.
    pub anonymous_read: BTreeSet<String>,
    /// Buckets anyone may list without signing (ListObjects, ListObjectsV2, HeadBucket). Defaults to none.
    pub anonymous_list: BTreeSet<String>,
    /// The region reported to clients. Defaults to `us-east-1`.
    pub region: String,
    /// TLS (see [`load_tls`]); `None`, the default, serves plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// A listener for `GET /metrics` (Prometheus text format); `None`, the default, serves no metrics.
    pub metrics_listener: Option<TcpListener>,
    /// How often the server runs a gc pass on the store; `None` never. Defaults to 10 minutes.
    pub gc_every: Option<Duration>,
    /// How long a shutdown waits for requests in flight before it drops them (an unfinished put then never
    /// commits). Defaults to 30 seconds.
    pub shutdown_timeout: Duration,
    /// Connections open at once; a connection accepted beyond it is closed at once. Defaults to 1024.
    pub max_connections: usize,
    /// Requests in flight at once (to the end of their response); one beyond it is answered
    /// `503 SlowDown` at once. Defaults to 512.
    pub max_requests: usize,
    /// How long a new connection (after its TLS handshake) may take to send its first request's head; a
    /// connection that sends nothing, or part of a request or of an HTTP/2 preface, is closed then. Defaults
    /// to 10 seconds.
    pub first_request_timeout: Duration,
    /// How long a connection may stay open with no request in flight (HTTP/1.1 keep-alive and HTTP/2 alike;
    /// for HTTP/1.1 it also bounds the time to send a request's head). Defaults to 30 seconds.
    pub idle_timeout: Duration,
    /// How long a request in flight may make no progress on the socket: a response the client stops reading,
    /// or a request body that stops arriving (`400 RequestTimeout`). Defaults to 30 seconds.
    pub io_timeout: Duration,
    /// The most multipart uploads in progress a bucket may hold: CreateMultipartUpload is refused
    /// (`InvalidRequest`, 400) beyond it. A soft cap: each server counts a bucket's uploads every 10 s and adds
    /// its own in between (docs/s3.md, *Limits*). `None`: no cap. Defaults to 10,000
    /// ([`DEFAULT_MAX_UPLOADS_PER_BUCKET`]).
    pub max_uploads_per_bucket: Option<usize>,
    /// The key SSE-S3 (`x-amz-server-side-encryption: AES256`) seals objects under: a key of the store's
    /// provider (a keyring name for `local`). Defaults to the store's own key
    /// ([`saltblob_core::EncryptionConfig::key`], the URL's `encryption_key`); with neither, SSE-S3 is refused.
    pub sse_s3_key: Option<String>,
    /// The key SSE-KMS (`aws:kms`) seals under when a request names none. Defaults to the SSE-S3 key.
    pub sse_kms_key: Option<String>,
    /// Whether SSE-C requests (which carry the customer's key in their headers) are taken on a server without
    /// [`Self::tls`], as behind a TLS-terminating proxy. Defaults to false: as AWS, such requests are refused
    /// (`400 InvalidRequest`) unless the connection is TLS.
    pub sse_c_over_http: bool,
}

impl ServerConfig {
    /// The defaults, with these access keys.
    pub fn new(credentials: Vec<AccessKey>) -> Self {
        Self {
            credentials: KeyRing::new(&credentials),
            anonymous_read: BTreeSet::new(),
            anonymous_list: BTreeSet::new(),
            region: "us-east-1".to_owned(),
            tls: None,
            metrics_listener: None,
            gc_every: Some(Duration::from_secs(600)),
            shutdown_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_requests: 512,
            first_request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(30),
            max_uploads_per_bucket: Some(DEFAULT_MAX_UPLOADS_PER_BUCKET),
            sse_s3_key: None,
            sse_kms_key: None,
            sse_c_over_http: false,
        }
    }

    /// Caps the multipart uploads in progress per bucket (`None` or 0: no cap).
    pub fn with_max_uploads_per_bucket(mut self, max: Option<usize>) -> Self {
        self.max_uploads_per_bucket = max.filter(|m| *m > 0);
        self
    }

    /// Sets [`Self::sse_s3_key`] and [`Self::sse_kms_key`] (`None`: their defaults).
    pub fn with_sse_keys(mut self, s3_key: Option<String>, kms_key: Option<String>) -> Self {
        self.sse_s3_key = s3_key;
        self.sse_kms_key = kms_key;
        self
    }

    /// Lets anyone read the objects of `bucket` without signing (not list them: [`Self::with_anonymous_list`]).
    pub fn with_anonymous_read(mut self, bucket: impl Into<String>) -> Self {
        self.anonymous_read.insert(bucket.into());
        self
    }

    /// Lets anyone list the objects of `bucket` without signing.
    pub fn with_anonymous_list(mut self, bucket: impl Into<String>) -> Self {
        self.anonymous_list.insert(bucket.into());
        self
    }

    /// Serves `GET /metrics` on `listener`.
    pub fn with_metrics_listener(mut self, listener: TcpListener) -> Self {
        self.metrics_listener = Some(listener);
        self
    }

    /// Runs gc every `every` (`None`: never).
    pub fn with_gc_every(mut self, every: Option<Duration>) -> Self {
        self.gc_every = every.filter(|e| !e.is_zero());
        self
    }

    /// Serves TLS with the certificate and key read from PEM files ([`load_tls`]).
    ///
    /// # Errors
    /// Those of [`load_tls`].
    pub fn with_tls_files(mut self, cert: &Path, key: &Path) -> std::io::Result<Self> {
        self.tls = Some(load_tls(cert, key)?);
        Ok(self)
    }

    /// Sets how long a shutdown waits for requests in flight.
    pub fn with_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Sets [`Self::max_connections`] and [`Self::max_requests`] (each at least 1).
    pub fn with_caps(mut self, max_connections: usize, max_requests: usize) -> Self {
        self.max_connections = max_connections.max(1);
        self.max_requests = max_requests.max(1);
        self
    }

    /// Sets [`Self::first_request_timeout`], [`Self::idle_timeout`] and [`Self::io_timeout`] (each at least
    /// 1 ms).
    pub fn with_timeouts(mut self, first_request: Duration, idle: Duration, io: Duration) -> Self {
        let floor = |d: Duration| d.max(Duration::from_millis(1));
        self.first_request_timeout = floor(first_request);
        self.idle_timeout = floor(idle);
        self.io_timeout = floor(io);
        self
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("credentials", &self.credentials)
            .field("anonymous_read", &self.anonymous_read)
            .field("anonymous_list", &self.anonymous_list)
            .field("region", &self.region)
            .field("tls", &self.tls.is_some())
            .field("metrics_listener", &self.metrics_listener)
            .field("gc_every", &self.gc_every)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_requests", &self.max_requests)
            .field("first_request_timeout", &self.first_request_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("max_uploads_per_bucket", &self.max_uploads_per_bucket)
            .field("sse_s3_key", &self.sse_s3_key)
            .field("sse_kms_key", &self.sse_kms_key)
            .field("sse_c_over_http", &self.sse_c_over_http)
            .finish()
    }
}
