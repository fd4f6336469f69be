//! TLS: the server serves HTTPS with a PEM certificate and key (a self-signed fixture for 127.0.0.1, valid
//! until 2126), and refuses files that are not a certificate and key.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::{StoreKind, TestServer};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[tokio::test]
async fn https_with_a_pem_certificate_and_key() {
    let s = TestServer::start_with(StoreKind::Memory, |c| {
        c.with_tls_files(&fixture("test-cert.pem"), &fixture("test-key.pem"))
            .expect("tls files")
    })
    .await;
    let cert = CertificateDer::from_pem_file(fixture("test-cert.pem")).expect("cert");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("root");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let send = async |call: crate::client::Call<'_>| {
        let tcp = tokio::net::TcpStream::connect(s.client.addr)
            .await
            .expect("connect");
        let name = ServerName::try_from("127.0.0.1").expect("name");
        let tls = connector.connect(name, tcp).await.expect("TLS handshake");
        crate::client::send_on(tls, call.into_request()).await
    };
    let reply = send(s.client.call("PUT", "/secure")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    // SSE-C keys are taken over TLS (a server without TLS refuses them: sse.rs).
    fn with_key(mut call: crate::client::Call<'_>) -> crate::client::Call<'_> {
        for (name, value) in crate::sse::sse_c("x-amz-", &[9; 32]) {
            call = call.header(&name, &value);
        }
        call
    }
    let reply = send(with_key(s.client.call("PUT", "/secure/k")).body("sealed")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = send(with_key(s.client.call("GET", "/secure/k"))).await;
    assert_eq!((reply.status, &reply.body[..]), (200, &b"sealed"[..]));

    // Plain HTTP on the TLS port gets no S3 answer.
    let plain = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let mut tcp = tokio::net::TcpStream::connect(s.client.addr)
            .await
            .expect("connect");
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let mut buf = Vec::new();
        let _ = tcp.read_to_end(&mut buf).await;
        buf
    })
    .await
    .expect("the server closes the connection");
    assert!(!String::from_utf8_lossy(&plain).contains("ListAllMyBucketsResult"));
}

#[test]
fn files_that_are_not_a_certificate_and_key_are_refused() {
    let cert = fixture("test-cert.pem");
    let err = saltblob_server::load_tls(&cert, &cert).expect_err("a certificate is no key");
    assert!(err.to_string().contains("test-cert.pem"), "{err}");
    let err = saltblob_server::load_tls(&fixture("missing.pem"), &fixture("test-key.pem"))
        .expect_err("missing file");
    assert!(err.to_string().contains("missing.pem"), "{err}");
}
