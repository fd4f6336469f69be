//! [`ServerConfig`]: how the server runs, its defaults and its builders; and [`load_tls`], which reads the TLS
//! certificate and key it serves with.

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::auth::{AccessKey, KeyRing};
use crate::upload_cap::DEFAULT_MAX_UPLOADS_PER_BUCKET;

/// How the server runs; [`ServerConfig::new`] gives the defaults. `docs/s3.md`, *Limits*, explains each limit.
#[must_use]
pub struct ServerConfig {
    /// The access keys accepted (SigV4). At least one is required: [`run`](crate::run) refuses to start without. The
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
    /// The length of a lifecycle day for the lifecycle pass: rules' days count these, and expiries fall at their
    /// ends (midnight UTC). Defaults to 24 hours; shorter only to test lifecycle rules (as RGW's
    /// `rgw_lc_debug_interval`); `x-amz-expiration` headers still count 24-hour days.
    pub lifecycle_day: Duration,
    /// How long a shutdown waits for requests in flight before it drops them (an unfinished put then never
    /// commits). Defaults to 30 seconds.
    pub shutdown_timeout: Duration,
    /// Connections open at once; a connection accepted beyond it is closed at once. Defaults to 1024, or the
    /// connections' share of the process's open-file limit when less ([`saltblob_core::fds::FdShares`]: half of
    /// what 64 reserved descriptors leave; 96 under `ulimit -n 256`).
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

/// The default of [`ServerConfig::max_connections`]: 1024, or the connections' share of the open-file limit.
pub fn default_max_connections() -> usize {
    let share = saltblob_core::fds::FdShares::current().connections;
    usize::try_from(share).unwrap_or(usize::MAX).min(1024)
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
            lifecycle_day: Duration::from_secs(86_400),
            shutdown_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
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

    /// Makes a lifecycle day last `day` (at least a second), to test lifecycle rules.
    pub fn with_lifecycle_day(mut self, day: Duration) -> Self {
        self.lifecycle_day = day.max(Duration::from_secs(1));
        self
    }

    /// Serves TLS with the certificate and key read from PEM files ([`load_tls`]).
    ///
    /// # Errors
    /// Those of [`load_tls`].
    pub fn with_tls_files(mut self, cert: &Path, key: &Path) -> io::Result<Self> {
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
            .field("lifecycle_day", &self.lifecycle_day)
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
