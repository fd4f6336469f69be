//! A client of the AWS KMS JSON API: one SigV4-signed `POST /` per call over HTTP/1.1, plain or TLS (rustls), on a
//! new connection each time (calls are rare: one per key and cache expiry), bounded by a timeout and retried when
//! the failure says a retry may help.

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

/// How long one attempt of a call may take, connection included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
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

/// A KMS client: endpoint, region and credentials.
#[derive(Clone)]
pub struct KmsClient {
    endpoint: Endpoint,
    region: String,
    credentials: Credentials,
}

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
        })
    }

    /// The endpoint, as given or derived from the region.
    pub fn endpoint(&self) -> &str {
        &self.endpoint.url
    }

    /// Calls KMS action `action` (`GenerateDataKey`, `Decrypt`, …) with `request`, and returns its answer;
    /// retries a retryable failure twice, after waits of up to 100 ms and 400 ms (`CALL_RETRY`).
    ///
    /// # Errors
    /// The last attempt's [`CallError`].
    pub async fn call(
        &self,
        action: &str,
        request: &Value,
    ) -> std::result::Result<Value, CallError> {
        let body = request.to_string().into_bytes();
        let attempt = || async {
            let result = tokio::time::timeout(CALL_TIMEOUT, self.attempt(action, &body))
                .await
                .unwrap_or_else(|_| {
                    Err(CallError::Unreachable(format!(
                        "no answer within {} s",
                        CALL_TIMEOUT.as_secs()
                    )))
                });
            if let Err(e) = &result {
                tracing::debug!("KMS {action} at {}: {e}", self.endpoint.url);
            }
            result
        };
        CALL_RETRY.retry(CallError::is_retryable, attempt).await
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
        let mut request = http::Request::builder().method("POST").uri("/");
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(Bytes::copy_from_slice(body)))
            .map_err(|e| CallError::Unreachable(format!("request: {e}")))?;
        let unreachable = |e: std::io::Error| {
            CallError::Unreachable(format!("cannot connect to {}: {e}", self.endpoint.url))
        };
        let tcp = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
            .await
            .map_err(unreachable)?;
        let _ = tcp.set_nodelay(true);
        let (status, answer) = match &self.endpoint.tls {
            None => exchange(tcp, request).await?,
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await.map_err(|e| {
                    CallError::Unreachable(format!(
                        "TLS handshake with {} failed: {e} (kms_ca=FILE names the CA to trust)",
                        self.endpoint.url
                    ))
                })?;
                exchange(tls, request).await?
            }
        };
        let json: Option<Value> = serde_json::from_slice(&answer).ok();
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

/// Sends `request` on `io` (HTTP/1.1) and returns the status and whole body.
async fn exchange<T>(
    io: T,
    request: http::Request<Full<Bytes>>,
) -> std::result::Result<(u16, Bytes), CallError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let failed = |e: hyper::Error| CallError::Unreachable(format!("HTTP: {e}"));
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(failed)?;
    let connection = tokio::spawn(connection);
    let answer = async {
        let response = sender.send_request(request).await.map_err(failed)?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.map_err(failed)?;
        Ok((status, body.to_bytes()))
    }
    .await;
    connection.abort();
    answer
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
}
