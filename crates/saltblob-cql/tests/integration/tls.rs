//! TLS to a real node: `scripts/cassandra.sh` starts its nodes with optional client encryption that requires a
//! client certificate signed by its test CA, and makes that material in its `tls` directory; `TEST_CQL_TLS_DIR`
//! names that directory (scripts/test.sh sets it).

use std::path::PathBuf;

use saltblob_core::conformance::small_config;
use saltblob_core::{BlobStore, Error, PutOptions};
use saltblob_cql::{CqlConfig, CqlStore};

use crate::{connect, url};

/// The directory of the test nodes' TLS material, from `TEST_CQL_TLS_DIR`; a test that needs it fails without it
/// (it was run with `--include-ignored`).
fn tls_dir() -> PathBuf {
    std::env::var_os("TEST_CQL_TLS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .expect("this test needs TEST_CQL_TLS_DIR: scripts/cassandra.sh's tls directory (/tmp/saltblob-cassandra/tls)")
}

/// The path of file `name` of the TLS directory, as a URL value.
fn file(name: &str) -> String {
    tls_dir().join(name).display().to_string()
}

/// The URL options of TLS trusting CA file `ca`, with the test client certificate if `client_cert`.
fn tls_options(ca: &str, client_cert: bool) -> String {
    let mut options = format!("tls=true&ca={}", file(ca));
    if client_cert {
        options += &format!("&cert={}&key={}", file("client.pem"), file("client.key"));
    }
    options
}

/// The error of connecting with URL `url`.
async fn connect_error(url: &str) -> Error {
    let config = CqlConfig::from_url(url).expect("test URL parses");
    match CqlStore::connect(config).await {
        Ok(_) => panic!("the connection must fail"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster with TLS: set TEST_CQL and TEST_CQL_TLS_DIR and pass --include-ignored"]
async fn tls_with_a_client_certificate_writes_and_reads() {
    let store = connect(&tls_options("ca.pem", true)).await;
    // The node sees this session's connections as TLS ones (and the plain ones of other tests as plain).
    let rows = store
        .session()
        .query_unpaged(
            "SELECT ssl_enabled, ssl_protocol FROM system_views.clients",
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let tls_clients: Vec<String> = rows
        .rows::<(Option<bool>, Option<String>)>()
        .unwrap()
        .filter_map(|row| match row.unwrap() {
            (Some(true), protocol) => Some(protocol.unwrap_or_default()),
            _ => None,
        })
        .collect();
    assert!(
        !tls_clients.is_empty(),
        "no TLS client connection on the node"
    );
    eprintln!("TLS connections on the node: {tls_clients:?}");

    let blobs = BlobStore::new(std::sync::Arc::new(store), small_config()).unwrap();
    let key = format!("tls-{:016x}", rand::random::<u64>());
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    blobs
        .put(key.as_str(), data.clone(), &PutOptions::new())
        .await
        .unwrap();
    assert_eq!(blobs.get(key.as_str()).await.unwrap().as_ref(), &data[..]);
    blobs.delete(key.as_str()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster with TLS: set TEST_CQL and TEST_CQL_TLS_DIR and pass --include-ignored"]
async fn a_wrong_ca_fails_naming_the_option_and_never_the_password() {
    let host = crate::cluster();
    let url = format!(
        "cql://saltblob:s3cret-pw@{host}/{}?rf=1&{}",
        crate::keyspace(),
        tls_options("wrong-ca.pem", true)
    );
    let e = connect_error(&url).await;
    let m = e.to_string();
    eprintln!("wrong CA: {m}");
    assert!(
        m.contains("over TLS")
            && m.contains("not signed by a certificate authority of ca=")
            && m.contains("wrong-ca.pem"),
        "{m}"
    );
    assert!(!e.is_retryable(), "a wrong CA is not transient: {m}");
    assert!(
        !m.contains("s3cret-pw") && !format!("{e:?}").contains("s3cret-pw"),
        "the password leaks: {e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster with TLS: set TEST_CQL and TEST_CQL_TLS_DIR and pass --include-ignored"]
async fn a_node_requiring_a_client_certificate_says_so() {
    let e = connect_error(&url(&tls_options("ca.pem", false))).await;
    let m = e.to_string();
    eprintln!("no client certificate: {m}");
    assert!(
        m.contains("over TLS") && m.contains("give cert=FILE&key=FILE"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_tls_files_fail_before_connecting() {
    // No cluster needed: the files are read before any connection.
    let config = CqlConfig::from_url(
        "cql://127.0.0.1:1/ks?tls=true&ca=/nonexistent/ca.pem&connect_timeout=1s",
    )
    .unwrap();
    match CqlStore::connect(config).await {
        Err(e @ Error::InvalidArgument { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("TLS option ca") && m.contains("/nonexistent/ca.pem"),
                "{m}"
            );
        }
        Err(other) => panic!("expected InvalidArgument, got {other:?}"),
        Ok(_) => panic!("nothing listens on port 1"),
    }
}
