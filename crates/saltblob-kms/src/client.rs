//! A client of the AWS KMS JSON API: one SigV4-signed `POST /` per call over HTTP/1.1, plain or TLS (rustls), on a
//! kept-alive connection when one is idle (a few are kept), else a new one; each call, its retries included, is
//! bounded by a deadline (`kms_timeout=`, [`CALL_DEADLINE`] by default), so that a KMS that does not answer costs a
//! request a short wait and a retryable error, and retried within it when the failure says a retry may help.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};
use saltblob_core::encryption::AwsKmsParams;
use saltblob_core::{Backoff, Error, Jitter, Result};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::sigv4::{self, Credentials};

/// How long one call may take by default, connection and retries included (`kms_timeout=`): 800 ms, ample for a
/// KMS in the same region (tens of ms a call), short enough that a KMS that does not answer fails a sealed request
/// within a second.
pub const CALL_DEADLINE: Duration = Duration::from_millis(800);
/// Idle connections kept for the next calls.
const IDLE_CONNECTIONS: usize = 4;
/// How a call whose failure is retryable (no answer, throttling, a KMS-side failure) is tried again: 3 attempts,
/// after waits of up to 100 and 400 ms, each drawn at random from zero to that (full jitter).
const CALL_RETRY: Backoff = Backoff::new(3, Duration::from_millis(100))
    .growing(4)
    .with_jitter(Jitter::Full);
/// The CA bundles tried, in order, for an `https://` endpoint without `kms_ca=`.
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Why a KMS call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The KMS answered with an error: its type (`DisabledException`, `NotFoundException`, …), message and
    /// HTTP status.
    Kms {
        /// The error type, without its namespace.
        kind: String,
        /// The KMS's message.
        message: String,
        /// The HTTP status.
        status: u16,
    },
    /// No answer (connection refused, TLS, timeout) or one that is not the KMS API's.
    Unreachable(String),
}

impl CallError {
    /// Whether the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unreachable(_) => true,
            Self::Kms { kind, status, .. } => {
                *status >= 500
                    || matches!(
                        kind.as_str(),
                        "ThrottlingException"
                            | "KMSInternalException"
                            | "DependencyTimeoutException"
                            | "LimitExceededException"
                    )
            }
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kms {
                kind,
                message,
                status,
            } if message.is_empty() => write!(f, "{kind} (HTTP {status})"),
            Self::Kms {
                kind,
                message,
                status,
            } => write!(f, "{kind}: {message} (HTTP {status})"),
            Self::Unreachable(why) => f.write_str(why),
        }
    }
}

/// Where the KMS is.
#[derive(Clone)]
struct Endpoint {
    /// As given (or derived), for messages.
    url: String,
    host: String,
    port: u16,
    /// The `host` header: with the port when it is not the scheme's default.
    authority: String,
    /// TLS for an `https://` endpoint.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

/// A KMS client: endpoint, region, credentials, deadline, and its idle connections (shared by its clones).
#[derive(Clone)]
pub struct KmsClient {
    endpoint: Endpoint,
    region: String,
    credentials: Credentials,
    deadline: Duration,
    idle: Arc<std::sync::Mutex<Vec<Sender>>>,
}

/// The sending half of an HTTP/1.1 connection to the KMS (its other half runs in a task of its own).
type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

impl std::fmt::Debug for KmsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsClient")
            .field("endpoint", &self.endpoint.url)
            .field("region", &self.region)
            .field("credentials", &self.credentials)
            .finish()
    }
}

impl KmsClient {
    /// The client `params` describe (see [`AwsKmsParams`] for the defaults), signing with `credentials`; the CA
    /// certificates of an `https://` endpoint are read here.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the parameter: a malformed endpoint, no region to derive the endpoint
    /// from, an unreadable CA file or none found.
    pub fn new(params: &AwsKmsParams, credentials: Credentials) -> Result<Self> {
        let env_region = || {
            ["AWS_REGION", "AWS_DEFAULT_REGION"]
                .into_iter()
                .find_map(|v| std::env::var(v).ok().filter(|r| !r.is_empty()))
        };
        let region = params.region.clone().or_else(env_region);
        let (url, region) = match (&params.endpoint, region) {
            (Some(url), region) => (url.clone(), region.unwrap_or_else(|| "us-east-1".into())),
            (None, Some(region)) => (format!("https://kms.{region}.amazonaws.com"), region),
            (None, None) => {
                return Err(Error::invalid(
                    "kms_region",
                    "no region: give kms_region=REGION (or kms_endpoint=URL), or set AWS_REGION",
                ));
            }
        };
        Ok(Self {
            endpoint: parse_endpoint(&url, params.ca.as_deref())?,
            region,
            credentials,
            deadline: params.timeout.unwrap_or(CALL_DEADLINE),
            idle: Arc::default(),
        })
    }

    /// The endpoint, as given or derived from the region.
    pub fn endpoint(&self) -> &str {
        &self.endpoint.url
    }

    /// Calls KMS action `action` (`GenerateDataKey`, `Decrypt`, …) with `request`, and returns its answer;
    /// retries a retryable failure twice, after waits of up to 100 ms and 400 ms (`CALL_RETRY`), all within the
    /// client's deadline.
    ///
    /// # Errors
    /// The last attempt's [`CallError`]; [`CallError::Unreachable`] when the deadline passed first.
    pub async fn call(
        &self,
        action: &str,
        request: &Value,
    ) -> std::result::Result<Value, CallError> {
        // An `Encrypt` request carries a plaintext data key: zeroed once sent.
        let body = zeroize::Zeroizing::new(request.to_string().into_bytes());
        let attempt = || async {
            let result = self.attempt(action, &body).await;
            if let Err(e) = &result {
                tracing::debug!("KMS {action} at {}: {e}", self.endpoint.url);
            }
            result
        };
        tokio::time::timeout(
            self.deadline,
            CALL_RETRY.retry(CallError::is_retryable, attempt),
        )
        .await
        .unwrap_or_else(|_| {
            Err(CallError::Unreachable(format!(
                "{} did not answer {action} within {} ms (kms_timeout=)",
                self.endpoint.url,
                self.deadline.as_millis()
            )))
        })
    }

    async fn attempt(&self, action: &str, body: &[u8]) -> std::result::Result<Value, CallError> {
        let target = format!("TrentService.{action}");
        let headers = sigv4::signed_headers(
            &self.credentials,
            &self.region,
            &self.endpoint.authority,
            &target,
            body,
            &sigv4::amz_date(SystemTime::now()),
        );
        let request = || {
            let mut request = http::Request::builder().method("POST").uri("/");
            for (name, value) in &headers {
                request = request.header(*name, value.as_str());
            }
            request
                .body(Full::new(Bytes::copy_from_slice(body)))
                .map_err(|e| CallError::Unreachable(format!("request: {e}")))
        };
        let (status, answer) = match self.idle_connection() {
            // A kept connection the KMS closed meanwhile fails at once: the call goes on a new one.
            Some(sender) => match exchange(sender, request()?).await {
                Ok((sender, answer)) => {
                    self.keep_idle(sender);
                    answer
                }
                Err(_) => self.exchange_new(request()?).await?,
            },
            None => self.exchange_new(request()?).await?,
        };
        let json: Option<Value> = serde_json::from_slice(&answer).ok();
        wipe(answer);
        if status == 200 {
            return json.ok_or_else(|| {
                CallError::Unreachable(format!(
                    "{} answered {action} with something other than JSON: is it a KMS?",
                    self.endpoint.url
                ))
            });
        }
        let field = |name: &str| {
            json.as_ref()
                .and_then(|j| j.get(name).or_else(|| j.get(name.to_lowercase())))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match field("__type") {
            Some(kind) => Err(CallError::Kms {
                kind: kind.rsplit('#').next().unwrap_or(&kind).to_owned(),
                message: field("Message").unwrap_or_default(),
                status,
            }),
            None => Err(CallError::Unreachable(format!(
                "{} answered {action} with HTTP {status} and no KMS error: is it a KMS?",
                self.endpoint.url
            ))),
        }
    }
}

/// Zeroes `answer` (a data key's plaintext may be in it) when this is its only holder, as it is once read whole.
fn wipe(answer: Bytes) {
    if let Ok(mut bytes) = answer.try_into_mut() {
        zeroize::Zeroize::zeroize(&mut bytes[..]);
    }
}

impl KmsClient {
    /// An idle connection that is still open, if one is kept.
    fn idle_connection(&self) -> Option<Sender> {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    /// Keeps `sender` for a later call, if it is open and fewer than [`IDLE_CONNECTIONS`] are kept.
    fn keep_idle(&self, sender: Sender) {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < IDLE_CONNECTIONS && !sender.is_closed() {
            idle.push(sender);
        }
    }

    /// Sends `request` on a new connection, which is kept afterwards.
    async fn exchange_new(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> std::result::Result<(u16, Bytes), CallError> {
        let (sender, answer) = exchange(self.connect().await?, request).await?;
        self.keep_idle(sender);
        Ok(answer)
    }

    /// A new connection to the endpoint, TLS when it is `https://`; its other half runs in a task of its own
    /// until the connection closes.
    async fn connect(&self) -> std::result::Result<Sender, CallError> {
        let unreachable = |e: std::io::Error| {
            CallError::Unreachable(format!("cannot connect to {}: {e}", self.endpoint.url))
        };
        let tcp = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
            .await
            .map_err(unreachable)?;
        let _ = tcp.set_nodelay(true);
        match &self.endpoint.tls {
            None => handshake(tcp).await,
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await.map_err(|e| {
                    CallError::Unreachable(format!(
                        "TLS handshake with {} failed: {e} (kms_ca=FILE names the CA to trust)",
                        self.endpoint.url
                    ))
                })?;
                handshake(tls).await
            }
        }
    }
}

/// HTTP/1.1 over `io`: the sending half; the connection runs in a task of its own until it closes.
async fn handshake<T>(io: T) -> std::result::Result<Sender, CallError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| CallError::Unreachable(format!("HTTP: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("KMS connection closed: {e}");
        }
    });
    Ok(sender)
}

/// Sends `request` on `sender` and returns the sender, the status and the whole body.
async fn exchange(
    mut sender: Sender,
    request: http::Request<Full<Bytes>>,
) -> std::result::Result<(Sender, (u16, Bytes)), CallError> {
    let failed = |e: hyper::Error| CallError::Unreachable(format!("HTTP: {e}"));
    sender.ready().await.map_err(failed)?;
    let response = sender.send_request(request).await.map_err(failed)?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.map_err(failed)?;
    Ok((sender, (status, body.to_bytes())))
}

/// The endpoint of `url` (`http://host[:port]` or `https://host[:port]`), with TLS trusting `ca` (default: the
/// system's bundle) for `https`.
fn parse_endpoint(url: &str, ca: Option<&Path>) -> Result<Endpoint> {
    let bad = |reason: String| Error::invalid("kms_endpoint", format!("{url:?}: {reason}"));
    let uri: http::Uri = url.parse().map_err(|e| {
        bad(format!(
            "not a URL ({e}); e.g. https://kms.eu-west-1.amazonaws.com"
        ))
    })?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(bad("give http:// or https://".into())),
    };
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad("a KMS endpoint has no path or query".into()));
    }
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let default_port = if https { 443 } else { 80 };
    let port = uri.port_u16().unwrap_or(default_port);
    let authority = match uri.port_u16() {
        Some(p) if p != default_port => format!("{}:{p}", uri.host().unwrap_or(&host)),
        _ => uri.host().unwrap_or(&host).to_owned(),
    };
    let tls = if https {
        let name = ServerName::try_from(host.clone())
            .map_err(|e| bad(format!("not a TLS server name ({e})")))?;
        Some((TlsConnector::from(tls_config(ca)?), name))
    } else {
        if ca.is_some() {
            return Err(Error::invalid(
                "kms_ca",
                format!("given for {url}, which is not https://"),
            ));
        }
        None
    };
    Ok(Endpoint {
        url: url.to_owned(),
        host,
        port,
        authority,
        tls,
    })
}

/// A TLS client configuration trusting the certificates of `ca`, else of the first system bundle found.
fn tls_config(ca: Option<&Path>) -> Result<Arc<ClientConfig>> {
    let path: PathBuf = match ca {
        Some(ca) => ca.to_owned(),
        None => SYSTEM_BUNDLES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Error::invalid(
                    "kms_ca",
                    format!(
                        "no system CA bundle ({}): give kms_ca=FILE (on Debian: apt-get install ca-certificates)",
                        SYSTEM_BUNDLES.join(", ")
                    ),
                )
            })?,
    };
    let invalid =
        |reason: String| Error::invalid("kms_ca", format!("{}: {reason}", path.display()));
    let bytes = std::fs::read(&path).map_err(|e| invalid(format!("cannot read it ({e})")))?;
    let mut roots = RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|e| invalid(format!("not PEM certificates ({e})")))?;
        // A bundle may hold certificates rustls cannot use; the others still count.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(invalid("holds no usable CA certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal("TLS protocol versions", e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> Credentials {
        Credentials {
            access_key_id: "a".into(),
            secret_access_key: zeroize::Zeroizing::new("b".into()),
            session_token: None,
        }
    }

    fn client(endpoint: Option<&str>, region: Option<&str>, ca: Option<&str>) -> Result<KmsClient> {
        let params = AwsKmsParams {
            endpoint: endpoint.map(str::to_owned),
            region: region.map(str::to_owned),
            ca: ca.map(PathBuf::from),
            timeout: None,
        };
        KmsClient::new(&params, credentials())
    }

    fn err(endpoint: Option<&str>, region: Option<&str>, ca: Option<&str>) -> String {
        client(endpoint, region, ca)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn endpoints_are_parsed_and_bad_ones_named() {
        let c = client(Some("http://127.0.0.1:5999"), None, None).unwrap();
        assert_eq!(
            (
                c.endpoint.host.as_str(),
                c.endpoint.port,
                c.endpoint.authority.as_str()
            ),
            ("127.0.0.1", 5999, "127.0.0.1:5999")
        );
        assert!(c.endpoint.tls.is_none());
        let c = client(Some("http://[::1]:80"), Some("eu-west-1"), None).unwrap();
        assert_eq!(
            (c.endpoint.host.as_str(), c.endpoint.authority.as_str()),
            ("::1", "[::1]")
        );
        assert_eq!(c.region, "eu-west-1");
        assert!(err(Some("kms.example"), None, None).contains("http:// or https://"));
        assert!(err(Some("http://h/path"), None, None).contains("no path"));
        assert!(err(Some("http://h"), None, Some("/ca.pem")).contains("kms_ca: given for"));
        assert!(
            err(Some("https://h"), None, Some("/nonexistent/ca.pem"))
                .contains("/nonexistent/ca.pem: cannot read it")
        );
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("ca.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        assert!(
            err(Some("https://h"), None, junk.to_str()).contains("holds no usable CA"),
            "{}",
            err(Some("https://h"), None, junk.to_str())
        );
    }

    #[test]
    fn the_endpoint_defaults_to_the_regions() {
        let c = client(None, Some("eu-central-1"), None);
        // Without a system bundle the error names kms_ca; with one, the endpoint is AWS's.
        match c {
            Ok(c) => {
                assert_eq!(c.endpoint(), "https://kms.eu-central-1.amazonaws.com");
                assert_eq!(c.endpoint.port, 443);
                assert_eq!(c.endpoint.authority, "kms.eu-central-1.amazonaws.com");
            }
            Err(e) => assert!(e.to_string().contains("kms_ca"), "{e}"),
        }
    }

    #[test]
    fn calls_are_tried_three_times() {
        let waits: Vec<_> = CALL_RETRY.nominal_waits().collect();
        assert_eq!(waits, [100, 400].map(Duration::from_millis));
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable_and_retryable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let c = client(Some(&format!("http://127.0.0.1:{port}")), None, None).unwrap();
        let e = c
            .call("DescribeKey", &serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(e.is_retryable());
        assert!(
            e.to_string()
                .contains("cannot connect to http://127.0.0.1:"),
            "{e}"
        );
    }

    /// A KMS-shaped HTTP/1.1 server on loopback that keeps connections alive: answers `{}` to every request
    /// (reading each by its content length), or, while `mute`, reads and never answers. Returns its URL and its
    /// count of connections accepted.
    async fn keep_alive_server(
        mute: Arc<std::sync::atomic::AtomicBool>,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, SeqCst);
                let mute = Arc::clone(&mute);
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    loop {
                        let mut length = 0usize;
                        loop {
                            let mut line = String::new();
                            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if let Some(v) =
                                line.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                length = v.trim().parse().unwrap_or(0);
                            }
                        }
                        let mut body = vec![0; length];
                        if stream.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        if mute.load(SeqCst) {
                            continue;
                        }
                        let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.1\r\n\
                                      content-length: 2\r\n\r\n{}";
                        if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    /// Calls go on one kept-alive connection; a KMS that stops answering fails a call at the deadline, retryably,
    /// and the next call (on a new connection) succeeds once it answers again.
    #[tokio::test]
    async fn calls_share_a_kept_alive_connection_and_fail_at_the_deadline() {
        use std::sync::atomic::Ordering::SeqCst;
        let mute = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (url, accepted) = keep_alive_server(Arc::clone(&mute)).await;
        let c = client(Some(&url), None, None).unwrap();
        for _ in 0..20 {
            let answer = c.call("Decrypt", &serde_json::json!({})).await.unwrap();
            assert_eq!(answer, serde_json::json!({}));
        }
        assert_eq!(accepted.load(SeqCst), 1, "20 calls, one connection");

        mute.store(true, SeqCst);
        let t = std::time::Instant::now();
        let e = c.call("Decrypt", &serde_json::json!({})).await.unwrap_err();
        let took = t.elapsed();
        assert!(e.is_retryable(), "{e}");
        assert!(e.to_string().contains("within 800 ms"), "{e}");
        assert!(
            (CALL_DEADLINE..CALL_DEADLINE + Duration::from_millis(300)).contains(&took),
            "failed after {took:?}"
        );
        mute.store(false, SeqCst);
        c.call("Decrypt", &serde_json::json!({})).await.unwrap();
    }
}
