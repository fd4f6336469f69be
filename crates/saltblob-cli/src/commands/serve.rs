//! `saltblob serve`: the S3-compatible server (crate `saltblob-server`; docs/s3.md).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::LocalBoxFuture;
use saltblob_server::{AccessKey, KeyRing, ServerConfig, parse_credentials};
use tokio::net::TcpListener;

use super::command::{Command, Context};
use crate::admin::{self, AdminSocket};
use crate::failure::Failure;
use crate::human::parse_size;

/// Arguments of `saltblob serve`.
#[derive(clap::Args, Debug)]
pub struct Serve {
    /// Address to serve S3 on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// Access keys: one "ACCESS_KEY_ID SECRET" pair per line, '#' starts a comment; the file must not be
    /// accessible by group or others (chmod 600), and is read again on SIGHUP. Without it, the key in
    /// SALTBLOB_ACCESS_KEY_ID and SALTBLOB_SECRET_ACCESS_KEY is used; with neither, the server does not start.
    #[arg(long, value_name = "FILE")]
    credentials: Option<PathBuf>,
    /// TLS certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics. Defaults to no metrics.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Buckets anyone may read without signing (GetObject, HeadObject, HeadBucket), comma-separated.
    #[arg(long, value_name = "BUCKET,...", value_delimiter = ',')]
    anonymous_read: Vec<String>,
    /// Buckets anyone may list without signing (ListObjects, ListObjectsV2, HeadBucket), comma-separated.
    #[arg(long, value_name = "BUCKET,...", value_delimiter = ',')]
    anonymous_list: Vec<String>,
    /// Connections served at once; one more is closed as soon as it is accepted. Defaults to 1024, or half of
    /// the open-file limit less 64 when that is less (docs/operations.md, *Open files*).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// Requests in flight at once; one more is answered 503 SlowDown.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    max_requests: u32,
    /// How long a new connection may take to send its first request's head (HTTP version detection included).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::human::parse_duration)]
    first_request_timeout: Duration,
    /// How long a connection may stay open with no request in flight (HTTP/1.1 keep-alive and HTTP/2).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::human::parse_duration)]
    idle_timeout: Duration,
    /// How long a request may make no progress: a response the client stops reading, a body that stops arriving.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::human::parse_duration)]
    io_timeout: Duration,
    /// Bytes all GETs together may fetch ahead of their clients (the store's read-ahead budget).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    read_ahead_budget: u64,
    /// The region reported to clients (HeadBucket, ListBuckets); requests signed for any region are accepted.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Run a gc pass, after deleting the objects bucket lifecycle rules expired, every DURATION (e.g. 10m); 0 never.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = crate::human::parse_duration)]
    gc_every: Duration,
    /// The length of a day for the lifecycle pass (rules' Days, NoncurrentDays and DaysAfterInitiation count
    /// these, exactly when shortened; x-amz-expiration headers still count 24 hours). Only to test lifecycle
    /// rules, as RGW's rgw_lc_debug_interval: e.g. 10s with --gc-every 1s.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = crate::human::parse_duration, hide_short_help = true)]
    lifecycle_day: Duration,
    /// How long a shutdown (SIGINT, SIGTERM) waits for requests in flight; unfinished puts never commit.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::human::parse_duration)]
    shutdown_timeout: Duration,
    /// The most multipart uploads in progress a bucket may hold; CreateMultipartUpload beyond it is refused
    /// (InvalidRequest). 0: no cap.
    #[arg(long, value_name = "N", default_value_t = saltblob_server::DEFAULT_MAX_UPLOADS_PER_BUCKET)]
    max_uploads_per_bucket: usize,
    /// The key SSE-S3 (x-amz-server-side-encryption: AES256) seals objects under: a key of the store's provider
    /// (a keyring name with encryption=local). Defaults to the store URL's encryption_key; with neither, SSE-S3
    /// requests are refused (never stored in plaintext).
    #[arg(long, value_name = "NAME")]
    sse_s3_key: Option<String>,
    /// The key SSE-KMS (aws:kms) seals under when a request names no key id. Defaults to the SSE-S3 key.
    #[arg(long, value_name = "NAME")]
    sse_kms_key: Option<String>,
    /// Take SSE-C requests (x-amz-server-side-encryption-customer-*, which carry the customer's key) without
    /// --tls-cert, as behind a TLS-terminating proxy. Without it, as AWS, they need a TLS connection.
    #[arg(long)]
    sse_c_over_http: bool,
    /// Buckets to create before serving, comma-separated (those that exist are left as they are), so that a
    /// client that cannot create buckets (a bench, an application) finds them.
    #[arg(long, value_name = "BUCKET,...", value_delimiter = ',')]
    create_bucket: Vec<String>,
    /// The admin socket (owner-only) through which `saltblob backup` asks this server for a backup of the store
    /// it holds, or "none". Defaults to admin.sock in an embedded store's directory; none for a cluster store.
    #[arg(long, value_name = "PATH|none")]
    admin_socket: Option<String>,
}

impl Command for Serve {
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(self.serve(context))
    }
}

impl Serve {
    /// The access keys, from --credentials or the environment.
    fn credentials(&self) -> Result<Vec<AccessKey>, Failure> {
        let keys = match &self.credentials {
            Some(path) => read_credentials(path).map_err(Failure::usage)?,
            None => match (
                std::env::var("SALTBLOB_ACCESS_KEY_ID"),
                std::env::var("SALTBLOB_SECRET_ACCESS_KEY"),
            ) {
                (Ok(id), Ok(secret)) if !id.is_empty() && !secret.is_empty() => {
                    vec![AccessKey::new(id, secret)]
                }
                _ => Vec::new(),
            },
        };
        if keys.is_empty() {
            return Err(Failure::usage(
                "no access key: give --credentials FILE (lines of ACCESS_KEY_ID SECRET) or set SALTBLOB_ACCESS_KEY_ID and SALTBLOB_SECRET_ACCESS_KEY (anonymous access is only per bucket, for reads: --anonymous-read)",
            ));
        }
        Ok(keys)
    }

    /// Checks that the keys of --sse-s3-key and --sse-kms-key are keys the store's provider can seal under now:
    /// a store without a provider, or a key it does not have, is a usage error; a provider that does not answer
    /// only a warning (each put asks again).
    async fn check_sse_keys(&self, store: &saltblob::BlobStore) -> Result<(), Failure> {
        let flags = [
            ("--sse-s3-key", self.sse_s3_key.as_deref()),
            ("--sse-kms-key", self.sse_kms_key.as_deref()),
        ];
        let named = flags
            .iter()
            .filter_map(|(flag, key)| Some((*flag, (*key)?)));
        if store.config().encryption.is_none() {
            if let Some((flag, _)) = named.clone().next() {
                return Err(Failure::usage(format!(
                    "{flag} names a key of the store's key provider, and this store has none: open it with encryption=local&keyring=FILE"
                )));
            }
            return Ok(());
        }
        for (flag, key) in named {
            match store.check_encryption_key(key).await {
                Ok(_) => {}
                Err(e) if e.is_retryable() => {
                    eprintln!("saltblob: warning: {flag} {key}: {e} (puts will ask again)");
                }
                Err(e) => return Err(Failure::usage(format!("{flag} {key}: {e}"))),
            }
        }
        Ok(())
    }

    /// `--max-connections`, or its default ([`saltblob_server::default_max_connections`]).
    fn max_connections(&self) -> usize {
        self.max_connections
            .map_or_else(saltblob_server::default_max_connections, |n| n as usize)
    }

    /// The names of --create-bucket, checked.
    fn buckets_to_create(&self) -> Result<Vec<&str>, Failure> {
        let names: Vec<&str> = self
            .create_bucket
            .iter()
            .map(|b| b.trim())
            .filter(|b| !b.is_empty())
            .collect();
        for name in &names {
            saltblob_server::check_bucket_name(name)
                .map_err(|e| Failure::usage(format!("--create-bucket: {e}")))?;
        }
        Ok(names)
    }

    /// Checks the options, binds the listeners, opens the store and serves until SIGINT or SIGTERM.
    async fn serve(&self, context: &Context) -> Result<(), Failure> {
        let create = self.buckets_to_create()?;
        let mut config = ServerConfig::new(self.credentials()?)
            .with_gc_every(Some(self.gc_every))
            .with_lifecycle_day(self.lifecycle_day)
            .with_shutdown_timeout(self.shutdown_timeout)
            .with_caps(self.max_connections(), self.max_requests as usize)
            .with_timeouts(
                self.first_request_timeout,
                self.idle_timeout,
                self.io_timeout,
            )
            .with_max_uploads_per_bucket(Some(self.max_uploads_per_bucket))
            .with_sse_keys(self.sse_s3_key.clone(), self.sse_kms_key.clone());
        config.region = self.region.clone();
        config.sse_c_over_http = self.sse_c_over_http;
        let buckets = |names: &[String]| {
            names
                .iter()
                .map(|b| b.trim().to_owned())
                .filter(|b| !b.is_empty())
                .collect()
        };
        config.anonymous_read = buckets(&self.anonymous_read);
        config.anonymous_list = buckets(&self.anonymous_list);
        warn_of_open_files_limit(self.max_connections());
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            config = config
                .with_tls_files(cert, key)
                .map_err(|e| Failure::usage(format!("invalid TLS files: {e}")))?;
        }
        let bind = async |addr: SocketAddr, what: &str| {
            TcpListener::bind(addr).await.map_err(|e| {
                Failure::new(
                    Failure::FAILED,
                    format!("cannot listen on {addr} ({what}): {e}"),
                )
            })
        };
        let listener = bind(self.listen, "--listen").await?;
        if let Some(addr) = self.metrics_listen {
            config = config.with_metrics_listener(bind(addr, "--metrics-listen").await?);
        }
        let read_ahead = usize::try_from(self.read_ahead_budget).unwrap_or(usize::MAX);
        let store = saltblob::open(
            &context.url,
            context.config.clone().with_read_ahead_budget(read_ahead),
        )
        .await?;
        self.check_sse_keys(&store).await?;
        // Bound once the store is held: a socket file there is a dead server's.
        let admin_socket = match self.admin_socket.as_deref() {
            Some("none") => None,
            Some(path) => Some(PathBuf::from(path)),
            None => admin::default_socket(&context.url),
        }
        .map(|path| AdminSocket::bind(&path))
        .transpose()?;
        for bucket in create {
            if saltblob_server::create_bucket(&store, bucket).await? {
                eprintln!("saltblob: created bucket {bucket}");
            }
        }
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        eprintln!(
            "saltblob: serving S3 on {scheme}://{} (store {}){}",
            self.listen,
            saltblob::redact_url(&context.url),
            self.metrics_listen
                .map(|a| format!(", metrics on http://{a}/metrics"))
                .unwrap_or_default()
        );
        if let Some(socket) = &admin_socket {
            eprintln!(
                "saltblob: admin socket (saltblob backup, saltblob key) on {}",
                socket.path().display()
            );
        }
        let _reload = self
            .credentials
            .clone()
            .map(|path| tokio::spawn(reload_on_sighup(path, config.credentials.clone())));
        let admin_task = admin_socket.map(|socket| tokio::spawn(socket.serve(store.clone())));
        let served = saltblob_server::run(listener, config, store, shutdown_signal()).await;
        if let Some(task) = admin_task {
            task.abort();
            // The socket's file goes with the task.
            let _ = task.await;
        }
        served?;
        eprintln!("saltblob: server stopped");
        Ok(())
    }
}

/// Reads and parses a credentials file, refusing one that group or others may access.
fn read_credentials(path: &Path) -> Result<Vec<AccessKey>, String> {
    let bytes = crate::secret_file::read_private(path, "--credentials")?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| format!("--credentials {} is not UTF-8 text", path.display()))?;
    parse_credentials(text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Replaces the keys of `ring` from the credentials file at `path` on every SIGHUP; a file that cannot be read
/// or holds no key leaves the keys as they were (and says why on stderr).
async fn reload_on_sighup(path: PathBuf, ring: KeyRing) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangup) = signal(SignalKind::hangup()) else {
            eprintln!(
                "saltblob: warning: cannot listen for SIGHUP: credentials will not be reloaded"
            );
            return;
        };
        while hangup.recv().await.is_some() {
            match read_credentials(&path) {
                Ok(keys) if !keys.is_empty() => {
                    ring.replace(&keys);
                    eprintln!(
                        "saltblob: reloaded {} access key(s) from {}",
                        keys.len(),
                        path.display()
                    );
                }
                Ok(_) => eprintln!(
                    "saltblob: error: {} holds no access key: keeping the {} key(s) in use",
                    path.display(),
                    ring.len()
                ),
                Err(e) => eprintln!(
                    "saltblob: error: reloading credentials failed, keeping the {} key(s) in use: {e}",
                    ring.len()
                ),
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, ring);
    }
}

/// Warns when `max_connections` sockets and the reserve of the store's files may not fit in the open-file
/// limit (raised to the hard limit at start, in `main`).
fn warn_of_open_files_limit(max_connections: usize) {
    let limit = saltblob::fds::open_files_limit();
    let needed = max_connections as u64 + saltblob::fds::RESERVED_FDS;
    if limit < needed {
        eprintln!(
            "saltblob: warning: the open files limit ({limit}) is below --max-connections plus {}; \
             connections may fail to be accepted (raise it with ulimit -n {needed})",
            saltblob::fds::RESERVED_FDS
        );
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A credentials file that group or others may access is refused with what to do; a private one is read.
    #[cfg(unix)]
    #[test]
    fn credentials_files_must_be_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("keys");
        std::fs::write(&path, "AKID1 s3cret1\n").expect("write");
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let err = read_credentials(&path).expect_err("refused");
            assert!(
                err.contains("accessible by group or others")
                    && err.contains("chmod 600")
                    && !err.contains("s3cret"),
                "{mode:o}: {err}"
            );
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let keys = read_credentials(&path).expect("private file");
        assert_eq!(keys.len(), 1);
    }
}
