//! TLS to the cluster: its options ([`TlsOptions`], the `tls`, `ca`, `cert` and `key` options of a `cql://`
//! URL), the rustls client configuration built from their PEM files, and the explanation of a failed handshake.
//!
//! The driver checks each node's certificate against the CAs of [`TlsOptions::ca`] and against the node's IP
//! address: the certificate must name that address in its subject alternative names (`IP:10.0.0.1`), as the
//! driver connects to addresses, not host names.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use saltblob_core::{Error, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CA: &str = "TLS option ca";
const CERT: &str = "TLS option cert";
const KEY: &str = "TLS option key";

/// TLS to the cluster's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct TlsOptions {
    /// PEM file of the certificate authorities that sign the nodes' certificates (one or more `CERTIFICATE`
    /// blocks). Only these are trusted, not the system's.
    pub ca: PathBuf,
    /// Client certificate shown to nodes that require one (`require_client_auth: true`). Defaults to none.
    pub client: Option<ClientCertificate>,
}

/// A client certificate and its private key, PEM files both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertificate {
    /// PEM file of the certificate chain, the client's own certificate first.
    pub cert: PathBuf,
    /// PEM file of its private key (PKCS#8, PKCS#1 or SEC1). Its contents are never printed.
    pub key: PathBuf,
}

impl TlsOptions {
    /// TLS trusting the CAs of PEM file `ca`, without a client certificate.
    pub fn new(ca: impl Into<PathBuf>) -> Self {
        Self {
            ca: ca.into(),
            client: None,
        }
    }

    /// Adds the client certificate of PEM files `cert` and `key`.
    pub fn with_client_certificate(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.client = Some(ClientCertificate {
            cert: cert.into(),
            key: key.into(),
        });
        self
    }

    /// The TLS options of a URL's `tls`, `ca`, `cert` and `key` values (paths already %-decoded): `None` without
    /// `tls=true`. A contradiction or a missing companion is an error naming the options at fault.
    pub(crate) fn from_url_options(
        tls: Option<&str>,
        ca: Option<String>,
        cert: Option<String>,
        key: Option<String>,
    ) -> std::result::Result<Option<Self>, String> {
        let enabled = match tls.map(str::to_ascii_lowercase).as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => {
                return Err(format!(
                    "tls={}: use true or false",
                    tls.unwrap_or_default()
                ));
            }
        };
        for (name, value) in [("ca", &ca), ("cert", &cert), ("key", &key)] {
            match value.as_deref() {
                Some("") => return Err(format!("{name}= is empty; name a PEM file")),
                Some(_) if !enabled => {
                    return Err(format!(
                        "{name}= is a TLS option: add tls=true to connect over TLS"
                    ));
                }
                _ => {}
            }
        }
        if !enabled {
            return Ok(None);
        }
        let ca = ca.ok_or(
            "tls=true needs ca=FILE, the PEM file of the certificate authority that signed the nodes' certificates",
        )?;
        let client = match (cert, key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(ClientCertificate {
                cert: cert.into(),
                key: key.into(),
            }),
            (Some(_), None) => {
                return Err(
                    "cert=FILE needs key=FILE, the client certificate's private key".into(),
                );
            }
            (None, Some(_)) => {
                return Err(
                    "key=FILE needs cert=FILE, the client certificate it belongs to".into(),
                );
            }
        };
        Ok(Some(Self {
            ca: ca.into(),
            client,
        }))
    }
}

/// The rustls client configuration of `tls`, its files read and checked: every problem is an
/// [`Error::InvalidArgument`] naming the option (`ca`, `cert`, `key`) and the file, never the key's contents.
pub(crate) fn client_config(tls: &TlsOptions) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for ca in read_certificates(CA, &tls.ca)? {
        roots.add(ca).map_err(|e| {
            invalid(
                CA,
                &tls.ca,
                format!("holds a certificate that cannot serve as a CA ({e})"),
            )
        })?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal("TLS protocol versions", e))?
        .with_root_certificates(roots);
    let config = match &tls.client {
        None => builder.with_no_client_auth(),
        Some(client) => {
            let chain = read_certificates(CERT, &client.cert)?;
            let bytes = read(KEY, &client.key)?;
            let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
                let reason = match e {
                    pem::Error::NoItemsFound => {
                        "holds no PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block)".into()
                    }
                    other => format!("is not a readable PEM private key ({other})"),
                };
                invalid(KEY, &client.key, reason)
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                invalid(
                    KEY,
                    &client.key,
                    format!(
                        "does not fit the certificate of cert={} ({e})",
                        client.cert.display()
                    ),
                )
            })?
        }
    };
    Ok(Arc::new(config))
}

/// Why a TLS connection to the cluster fails, found by connecting to `hosts` (`host:port` each) in turn with
/// `config`: a TLS handshake, then one CQL `OPTIONS` request (TLS 1.3 servers refuse a client certificate only
/// after the handshake), all within `timeout`. `None` if no host is reachable over TCP in that time or one accepts
/// the connection: then TLS is not the cause.
pub(crate) async fn explain_failure(
    hosts: &[String],
    config: Arc<ClientConfig>,
    tls: &TlsOptions,
    timeout: Duration,
) -> Option<String> {
    let connector = tokio_rustls::TlsConnector::from(config);
    let deadline = tokio::time::Instant::now() + timeout;
    for host in hosts {
        let Ok(Ok(tcp)) =
            tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect(host.as_str())).await
        else {
            continue;
        };
        let Ok(address) = tcp.peer_addr() else {
            continue;
        };
        // As the driver does: the node is checked by its IP address.
        let name = ServerName::IpAddress(address.ip().into());
        let exchange = async {
            let mut stream = connector
                .connect(name, tcp)
                .await
                .map_err(|e| (Phase::Handshake, e))?;
            // A CQL v4 OPTIONS frame; the answer's 9-byte header is enough.
            let mut header = [0u8; 9];
            async {
                stream.write_all(&[0x04, 0, 0, 0, 0x05, 0, 0, 0, 0]).await?;
                stream.read_exact(&mut header).await.map(|_| ())
            }
            .await
            .map_err(|e| (Phase::AfterHandshake, e))
        };
        match tokio::time::timeout_at(deadline, exchange).await {
            Ok(Ok(())) => return None,
            Ok(Err((phase, e))) => {
                let reason = match e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                {
                    Some(tls_error) => explain(tls_error, tls, address.ip()),
                    None => explain_broken(phase, &e, tls),
                };
                return Some(format!("TLS to {address}: {reason}"));
            }
            Err(_) => {
                return Some(format!(
                    "TLS to {address}: no TLS answer within {timeout:?}; does the node speak TLS on this port \
                     (client_encryption_options)?"
                ));
            }
        }
    }
    None
}

/// Where a TLS probe of [`explain_failure`] broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Handshake,
    AfterHandshake,
}

/// What a connection broken by I/O error `e` (no TLS alert read) in `phase` means for the user of `tls`.
///
/// A TLS 1.3 node refuses a missing or unknown client certificate only after the handshake, with an alert and a
/// close; when the client's request crosses that close, the node's kernel answers with a reset that discards
/// the alert. So a break after a good handshake points at the client certificate, one during it at the port.
fn explain_broken(phase: Phase, e: &std::io::Error, tls: &TlsOptions) -> String {
    match (phase, &tls.client) {
        (Phase::Handshake, _) => {
            format!("the TLS connection broke ({e}); does the node speak TLS on this port?")
        }
        (Phase::AfterHandshake, None) => format!(
            "the node closed the connection after the TLS handshake, before any answer ({e}); if it requires \
             client certificates (require_client_auth), give cert=FILE&key=FILE"
        ),
        (Phase::AfterHandshake, Some(client)) => format!(
            "the node closed the connection after the TLS handshake, before any answer ({e}); does it accept \
             the client certificate of cert={} (is it signed by a CA in the node's truststore)?",
            client.cert.display()
        ),
    }
}

/// What rustls error `e` means for the user of `tls` connecting to `ip`, naming the option to look at.
fn explain(e: &rustls::Error, tls: &TlsOptions, ip: std::net::IpAddr) -> String {
    let ca = tls.ca.display();
    match e {
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => format!(
            "the node's certificate is not signed by a certificate authority of ca={ca} (wrong CA file?) ({e})"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "the node's certificate does not name its address {ip} in its subject alternative names (the driver \
             checks nodes by IP address) ({e})"
        ),
        rustls::Error::InvalidCertificate(_) => {
            format!("the node's certificate is refused when checked against ca={ca}: {e}")
        }
        rustls::Error::AlertReceived(alert) => match &tls.client {
            None => format!(
                "the node ended the handshake ({alert:?}); if it requires client certificates \
                 (require_client_auth), give cert=FILE&key=FILE"
            ),
            Some(client) => format!(
                "the node refused the client certificate of cert={} ({alert:?}); is it signed by a CA in the \
                 node's truststore?",
                client.cert.display()
            ),
        },
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => format!(
            "the node does not answer in TLS on this port: is client_encryption_options enabled there? ({e})"
        ),
        other => format!("the TLS handshake failed: {other}"),
    }
}

/// The certificates of PEM file `path`, given as TLS option `option`: at least one.
fn read_certificates(option: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let bytes = read(option, path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid(option, path, format!("is not readable PEM ({e})")))?;
    if certificates.is_empty() {
        return Err(invalid(
            option,
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certificates)
}

/// The contents of file `path`, given as TLS option `option`.
fn read(option: &'static str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| invalid(option, path, format!("cannot be read: {e}")))
}

/// An [`Error::InvalidArgument`] about file `path` of TLS option `what` (`TLS option ca`, ...).
fn invalid(what: &'static str, path: &Path, reason: impl Display) -> Error {
    Error::invalid(what, format!("the file {} {reason}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture of `tests/tls` (see its `make.sh`).
    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/tls")
            .join(name)
    }

    /// The base64 lines of key fixture `name`.
    fn key_lines(name: &str) -> Vec<String> {
        let pem = std::fs::read_to_string(fixture(name)).unwrap();
        pem.lines()
            .filter(|l| !l.starts_with("-----"))
            .map(String::from)
            .collect()
    }

    fn config_error(tls: &TlsOptions) -> String {
        match client_config(tls) {
            Err(e @ Error::InvalidArgument { .. }) => e.to_string(),
            Err(other) => panic!("expected InvalidArgument, got {other:?}"),
            Ok(_) => panic!("{tls:?} must be refused"),
        }
    }

    #[test]
    fn url_options_need_each_other() {
        let parse = |tls, ca: Option<&str>, cert: Option<&str>, key: Option<&str>| {
            TlsOptions::from_url_options(
                tls,
                ca.map(Into::into),
                cert.map(Into::into),
                key.map(Into::into),
            )
        };
        assert_eq!(parse(None, None, None, None), Ok(None));
        assert_eq!(parse(Some("false"), None, None, None), Ok(None));
        assert_eq!(
            parse(Some("TRUE"), Some("/ca.pem"), None, None),
            Ok(Some(TlsOptions::new("/ca.pem")))
        );
        assert_eq!(
            parse(Some("true"), Some("ca.pem"), Some("c.pem"), Some("c.key")),
            Ok(Some(
                TlsOptions::new("ca.pem").with_client_certificate("c.pem", "c.key")
            ))
        );
        for (tls, ca, cert, key, needle) in [
            (Some("yes"), None, None, None, "tls=yes: use true or false"),
            (Some("true"), None, None, None, "tls=true needs ca=FILE"),
            (
                None,
                Some("ca.pem"),
                None,
                None,
                "ca= is a TLS option: add tls=true",
            ),
            (
                Some("false"),
                None,
                Some("c.pem"),
                Some("c.key"),
                "cert= is a TLS option",
            ),
            (Some("true"), Some(""), None, None, "ca= is empty"),
            (
                Some("true"),
                Some("ca.pem"),
                Some("c.pem"),
                None,
                "cert=FILE needs key=FILE",
            ),
            (
                Some("true"),
                Some("ca.pem"),
                None,
                Some("c.key"),
                "key=FILE needs cert=FILE",
            ),
        ] {
            let e = parse(tls, ca, cert, key).expect_err(needle);
            assert!(e.contains(needle), "{e:?} should say {needle:?}");
        }
    }

    #[test]
    fn a_break_after_the_handshake_points_at_the_client_certificate() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let without = TlsOptions::new("ca.pem");
        let with = TlsOptions::new("ca.pem").with_client_certificate("c.pem", "c.key");
        let during = explain_broken(Phase::Handshake, &reset, &without);
        assert!(
            during.contains("does the node speak TLS on this port"),
            "{during}"
        );
        assert!(!during.contains("cert="), "{during}");
        let after = explain_broken(Phase::AfterHandshake, &reset, &without);
        assert!(
            after.contains("after the TLS handshake") && after.contains("give cert=FILE&key=FILE"),
            "{after}"
        );
        let refused = explain_broken(Phase::AfterHandshake, &reset, &with);
        assert!(refused.contains("cert=c.pem"), "{refused}");
    }

    #[tokio::test]
    async fn a_port_without_tls_is_explained() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut hello = [0u8; 512];
            let _ = socket.read(&mut hello).await;
            // What a node without TLS answers to a ClientHello: a plain CQL v4 ERROR frame.
            let _ = socket
                .write_all(&[0x84, 0, 0, 0, 0x00, 0, 0, 0, 0x06, 0, 0, 0x00, 0x0a, 0, 0])
                .await;
        });
        let tls = TlsOptions::new(fixture("ca.pem"));
        let config = client_config(&tls).unwrap();
        let why = explain_failure(&[address.to_string()], config, &tls, Duration::from_secs(5))
            .await
            .expect("a TLS failure");
        assert!(
            why.contains(&address.to_string())
                && why.contains("does not answer in TLS on this port"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn a_silent_port_is_explained_within_the_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { listener.accept().await });
        let tls = TlsOptions::new(fixture("ca.pem"));
        let config = client_config(&tls).unwrap();
        let t0 = std::time::Instant::now();
        let why = explain_failure(
            &[address.to_string()],
            config,
            &tls,
            Duration::from_millis(300),
        )
        .await
        .expect("a TLS failure");
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "took {:?}",
            t0.elapsed()
        );
        assert!(why.contains("no TLS answer within 300ms"), "{why}");
        server.abort();
    }

    #[tokio::test]
    async fn unreachable_hosts_are_not_a_tls_failure() {
        let tls = TlsOptions::new(fixture("ca.pem"));
        let config = client_config(&tls).unwrap();
        let why = explain_failure(
            &["127.0.0.1:1".into()],
            config,
            &tls,
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(why, None);
    }

    #[test]
    fn good_files_load() {
        assert!(client_config(&TlsOptions::new(fixture("ca.pem"))).is_ok());
        let with_client = TlsOptions::new(fixture("ca.pem"))
            .with_client_certificate(fixture("client.pem"), fixture("client.key"));
        assert!(client_config(&with_client).is_ok());
    }

    #[test]
    fn bad_files_are_refused_naming_the_option_and_file() {
        let ca = fixture("ca.pem");
        for (tls, option, file, needle) in [
            (
                TlsOptions::new(fixture("missing.pem")),
                "ca",
                "missing.pem",
                "cannot be read",
            ),
            (
                TlsOptions::new(fixture("client.key")),
                "ca",
                "client.key",
                "holds no PEM certificate",
            ),
            (
                TlsOptions::new(fixture("make.sh")),
                "ca",
                "make.sh",
                "holds no PEM certificate",
            ),
            (
                TlsOptions::new(&ca)
                    .with_client_certificate(fixture("missing.pem"), fixture("client.key")),
                "cert",
                "missing.pem",
                "cannot be read",
            ),
            (
                TlsOptions::new(&ca)
                    .with_client_certificate(fixture("client.key"), fixture("client.key")),
                "cert",
                "client.key",
                "holds no PEM certificate",
            ),
            (
                TlsOptions::new(&ca)
                    .with_client_certificate(fixture("client.pem"), fixture("client.pem")),
                "key",
                "client.pem",
                "holds no PEM private key",
            ),
            (
                TlsOptions::new(&ca)
                    .with_client_certificate(fixture("client.pem"), fixture("other.key")),
                "key",
                "other.key",
                "does not fit the certificate of cert=",
            ),
        ] {
            let e = config_error(&tls);
            assert!(
                e.starts_with(&format!("invalid TLS option {option}: the file "))
                    && e.contains(file)
                    && e.contains(needle),
                "{e:?} should name {option}, {file} and say {needle:?}"
            );
            for line in key_lines("client.key")
                .iter()
                .chain(&key_lines("other.key"))
            {
                assert!(!e.contains(line.as_str()), "no key material in {e:?}");
            }
        }
    }
}
