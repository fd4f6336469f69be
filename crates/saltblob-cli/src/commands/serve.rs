//! `saltblob serve`: the S3-compatible server (crate `saltblob-server`; docs/s3.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use saltblob_server::{AccessKey, ServerConfig, parse_credentials};
use tokio::net::TcpListener;

use super::command::{Command, Context};
use crate::failure::Failure;

/// Arguments of `saltblob serve`.
#[derive(clap::Args, Debug)]
pub struct Serve {
    /// Address to serve S3 on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// Access keys: one "ACCESS_KEY_ID SECRET" pair per line, '#' starts a comment. Without it, the key in
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
    /// Buckets anyone may read without signing (GetObject, HeadObject, ListObjects, HeadBucket), comma-separated.
    #[arg(long, value_name = "BUCKET,...", value_delimiter = ',')]
    anonymous_read: Vec<String>,
    /// The region reported to clients (HeadBucket, ListBuckets); requests signed for any region are accepted.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Run a gc pass every DURATION (e.g. 10m); 0 never.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    gc_every: Duration,
    /// How long a shutdown (SIGINT, SIGTERM) waits for requests in flight; unfinished puts never commit.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    shutdown_timeout: Duration,
    /// The most multipart uploads in progress a bucket may hold; CreateMultipartUpload beyond it is refused
    /// (InvalidRequest). 0: no cap.
    #[arg(long, value_name = "N", default_value_t = saltblob_server::DEFAULT_MAX_UPLOADS_PER_BUCKET)]
    max_uploads_per_bucket: usize,
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
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Failure::usage(format!("cannot read --credentials {}: {e}", path.display()))
                })?;
                parse_credentials(&text)
                    .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?
            }
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

    /// Checks the options, binds the listeners, opens the store and serves until SIGINT or SIGTERM.
    async fn serve(&self, context: &Context) -> Result<(), Failure> {
        let mut config = ServerConfig::new(self.credentials()?)
            .with_gc_every(Some(self.gc_every))
            .with_shutdown_timeout(self.shutdown_timeout)
            .with_max_uploads_per_bucket(Some(self.max_uploads_per_bucket));
        config.region = self.region.clone();
        config.anonymous_read = self
            .anonymous_read
            .iter()
            .map(|b| b.trim().to_owned())
            .filter(|b| !b.is_empty())
            .collect();
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
        let store = context.open().await?;
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
        saltblob_server::run(listener, config, store, shutdown_signal()).await?;
        eprintln!("saltblob: server stopped");
        Ok(())
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
