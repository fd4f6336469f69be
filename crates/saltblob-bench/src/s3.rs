//! An S3 endpoint as the bench's target (`--store s3+http://HOST:PORT/BUCKET`, or `s3+https://…`), through
//! object_store's S3 client: the client a Rust service would use, so that what the bench measures through
//! `saltblob serve` includes a real client's signing, connection pool and HTTP stack.
//!
//! Credentials and other client settings come from the environment as object_store reads it
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, …), and from the URL's query, whose parameters
//! are object_store's S3 configuration keys (`?aws_unsigned_payload=true`, `?aws_region=eu-west-1`). The client
//! never retries: a failed request is counted as the bench counts every failure.

use std::str::FromStr;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use saltblob::{Error, Result};

use crate::results::Cleanup;

/// The URL schemes of an S3 endpoint, and the scheme of the endpoint each stands for.
const SCHEMES: [(&str, &str); 2] = [("s3+http://", "http://"), ("s3+https://", "https://")];

/// What a secret's value is shown as.
const HIDDEN: &str = "REDACTED";
/// Parts of the names of the settings whose values are secrets (credentials, an SSE-C key), never shown.
const SECRET_PARTS: [&str; 5] = ["secret", "token", "access_key", "customer_key", "password"];

/// Whether `url` names an S3 endpoint rather than a saltblob store.
pub(crate) fn is_s3_url(url: &str) -> bool {
    SCHEMES.iter().any(|(scheme, _)| url.starts_with(scheme))
}

/// A bucket of an S3 endpoint: where the bench's operations go with an `s3+http(s)://` URL.
#[derive(Clone)]
pub(crate) struct S3Target {
    client: Arc<AmazonS3>,
    /// How the client was made, for [`S3Target::second_client`].
    builder: Arc<AmazonS3Builder>,
    /// The endpoint, bucket and client settings as shown: secrets' values are [`HIDDEN`].
    shown: String,
}

impl S3Target {
    /// The client for `url` (`s3+http://HOST[:PORT]/BUCKET[?KEY=VALUE&…]`; each value is `%XX`-decoded, so a
    /// secret holding `&` is written `%26`). A URL without a bucket, a query key object_store does not know, a bad
    /// `%` escape, or no credentials (unless `aws_skip_signature=true`) is `Error::InvalidArgument`; nothing is
    /// sent. Errors never repeat the query's values, which may hold a secret.
    pub(crate) fn open(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::invalid("S3 URL", reason);
        let (rest, endpoint_scheme) = SCHEMES
            .iter()
            .find_map(|(scheme, plain)| Some((url.strip_prefix(scheme)?, *plain)))
            .ok_or_else(|| bad("not s3+http://HOST:PORT/BUCKET or s3+https://…".to_owned()))?;
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (host, bucket) = location
            .split_once('/')
            .map(|(h, b)| (h, b.trim_end_matches('/')))
            .filter(|(h, b)| !h.is_empty() && !b.is_empty() && !b.contains('/'))
            .ok_or_else(|| {
                bad(format!(
                    "{endpoint_scheme}{location} names no bucket: s3+http://HOST:PORT/BUCKET"
                ))
            })?;
        let mut builder = AmazonS3Builder::from_env()
            .with_endpoint(format!("{endpoint_scheme}{host}"))
            .with_bucket_name(bucket)
            .with_allow_http(endpoint_scheme == "http://")
            .with_virtual_hosted_style_request(false)
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            });
        if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            builder = builder.with_region("us-east-1");
        }
        let mut settings = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = AmazonS3ConfigKey::from_str(name)
                .map_err(|e| bad(format!("query parameter {name:?}: {e}")))?;
            let decoded = saltblob::unescape_key(value)
                .ok()
                .and_then(|v| String::from_utf8(v).ok())
                .ok_or_else(|| {
                    bad(format!(
                        "the value of query parameter {name:?} has a '%' not followed by two hex digits (write a \
                         '%' as %25), or is not UTF-8 once decoded"
                    ))
                })?;
            builder = builder.with_config(key, decoded);
            let secret = SECRET_PARTS
                .iter()
                .any(|part| name.to_ascii_lowercase().contains(part));
            settings.push(format!("{name}={}", if secret { HIDDEN } else { value }));
        }
        let anonymous = builder
            .get_config_value(&AmazonS3ConfigKey::SkipSignature)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if !anonymous
            && builder
                .get_config_value(&AmazonS3ConfigKey::AccessKeyId)
                .is_none()
        {
            return Err(bad(
                "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (the keys `saltblob serve` takes)"
                    .to_owned(),
            ));
        }
        let query = if settings.is_empty() {
            String::new()
        } else {
            format!("?{}", settings.join("&"))
        };
        let shown = format!("s3+{endpoint_scheme}{host}/{bucket}{query}");
        let client = builder
            .clone()
            .build()
            .map_err(|e| bad(format!("{shown}: {e}")))?;
        Ok(Self {
            client: Arc::new(client),
            builder: Arc::new(builder),
            shown,
        })
    }

    /// The S3 client.
    pub(crate) fn client(&self) -> &AmazonS3 {
        &self.client
    }

    /// A second client of the same endpoint and settings, with a connection pool of its own: a second program
    /// using the bucket.
    pub(crate) fn second_client(&self) -> Result<Self> {
        let client = AmazonS3Builder::clone(&self.builder)
            .build()
            .map_err(|e| Error::invalid("S3 URL", format!("{}: {e}", self.shown)))?;
        Ok(Self {
            client: Arc::new(client),
            builder: Arc::clone(&self.builder),
            shown: self.shown.clone(),
        })
    }

    /// The endpoint, bucket and settings, for the report (secrets hidden).
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// PutObject of `data` at `key`; returns the bytes sent.
    pub(crate) async fn put(&self, key: &str, data: Bytes) -> Result<u64> {
        let len = data.len() as u64;
        self.client
            .put(&Path::from(key), PutPayload::from_bytes(data))
            .await
            .map_err(from_client)?;
        Ok(len)
    }

    /// GetObject of `key`, the whole body.
    pub(crate) async fn get(&self, key: &str) -> Result<Bytes> {
        let got = self
            .client
            .get(&Path::from(key))
            .await
            .map_err(from_client)?;
        got.bytes().await.map_err(from_client)
    }

    /// DeleteObject of `key`.
    pub(crate) async fn delete(&self, key: &str) -> Result<()> {
        self.client
            .delete(&Path::from(key))
            .await
            .map_err(from_client)
    }

    /// Deletes every object under `prefix`, `concurrency` at once; stops at the first failure.
    pub(crate) async fn cleanup(&self, prefix: &str, concurrency: usize) -> Cleanup {
        let mut out = Cleanup::default();
        let listed = self.client.list(Some(&Path::from(prefix)));
        let mut deletes = listed
            .map_err(|e| format!("listing the bench's objects failed: {e}"))
            .map_ok(|meta| {
                let client = Arc::clone(&self.client);
                async move {
                    client
                        .delete(&meta.location)
                        .await
                        .map_err(|e| format!("delete failed: {e}"))
                }
            })
            .try_buffer_unordered(concurrency.max(1));
        while let Some(deleted) = deletes.next().await {
            match deleted {
                Ok(()) => out.deleted_keys += 1,
                Err(problem) => {
                    out.problems.push(problem);
                    break;
                }
            }
        }
        out
    }
}

/// `saltblob serve` in this process on a loopback port, over a bench's store, with one bucket, and an S3 client
/// of it (signed payloads, object_store's default).
pub(crate) struct Served {
    pub(crate) client: S3Target,
    /// The client's URL, for [`Served::client_with`].
    url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    /// Creates `bucket` in `store` and serves the store on 127.0.0.1, port 0.
    pub(crate) async fn start(store: saltblob::BlobStore, bucket: &str) -> Result<Self> {
        use saltblob_server::{AccessKey, ServerConfig};
        const AKID: &str = "bench";
        const SECRET: &str = "bench-secret";
        saltblob_server::create_bucket(&store, bucket).await?;
        let io =
            |e: std::io::Error| Error::backend("bench", format!("loopback listener: {e}"), false);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io)?;
        let addr = listener.local_addr().map_err(io)?;
        let config = ServerConfig::new(vec![AccessKey::new(AKID, SECRET)]);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(saltblob_server::run(listener, config, store, async move {
            let _ = stopped.await;
        }));
        let url = format!(
            "s3+http://{addr}/{bucket}?aws_access_key_id={AKID}&aws_secret_access_key={SECRET}"
        );
        let client = S3Target::open(&url)?;
        Ok(Self {
            client,
            url,
            stop,
            task,
        })
    }

    /// Another client of the server, with object_store settings `query` (`KEY=VALUE&…`) added.
    pub(crate) fn client_with(&self, query: &str) -> Result<S3Target> {
        S3Target::open(&format!("{}&{query}", self.url))
    }

    /// Stops the server and waits for it.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// The client's error as saltblob's: a missing object is `NotFound`, a refused condition `PreconditionFailed`,
/// anything else a backend error that may succeed if retried (the bench only counts it).
fn from_client(e: object_store::Error) -> Error {
    match e {
        object_store::Error::NotFound { path, .. } => Error::NotFound {
            key: path.as_bytes().into(),
        },
        e => Error::backend("s3", e.to_string(), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing listens on the URLs' port: opening sends no request.
    const BASE: &str = "s3+http://127.0.0.1:9/bucket?aws_access_key_id=A";

    #[test]
    fn query_values_are_percent_decoded_and_secrets_never_shown() {
        let t = S3Target::open(&format!(
            "{BASE}&aws_secret_access_key=s%26e%25t&aws_region=eu-west-1"
        ))
        .expect("opens");
        let secret = t
            .builder
            .get_config_value(&AmazonS3ConfigKey::SecretAccessKey);
        assert_eq!(secret.as_deref(), Some("s&e%t"));
        assert!(
            t.shown.contains(&format!("aws_secret_access_key={HIDDEN}")),
            "{}",
            t.shown
        );
        assert!(
            !t.shown.contains("s%26e") && !t.shown.contains("s&e"),
            "{}",
            t.shown
        );
        assert!(t.shown.ends_with("aws_region=eu-west-1"), "{}", t.shown);
    }

    #[test]
    fn a_bad_escape_is_refused_without_its_value() {
        for value in ["se%2xcret", "secret%", "%ff%fe"] {
            let err = S3Target::open(&format!("{BASE}&aws_secret_access_key={value}"))
                .err()
                .expect("refused");
            let said = err.to_string();
            assert!(
                said.contains("aws_secret_access_key") && said.contains("%25"),
                "{said}"
            );
            assert!(!said.contains(value), "{said}");
        }
    }
}
