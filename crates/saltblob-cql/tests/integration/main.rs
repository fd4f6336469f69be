//! Integration tests against a real Cassandra or ScyllaDB. They are ignored unless asked for, so that a run
//! without a cluster reports them as skipped: start a node (`scripts/cassandra.sh start1`) and run
//! `TEST_CQL=127.0.0.1:9042 cargo test --release -p saltblob-cql -- --include-ignored --skip cluster::`
//! (`cluster::` needs three nodes and `TEST_CQL_CLUSTER`; see scripts/test.sh).
//!
//! All tests of this binary share one keyspace, `saltblob_it_<random>`, created by the first test to connect;
//! the conformance cases use random key prefixes of their own. The limits tests, which reclaim every queued
//! version at once (`reclaim_all`, ignoring the grace period others rely on), use a keyspace of their own,
//! [`limits_keyspace`].
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, OnceLock};

use saltblob_core::conformance::Fixture;
use saltblob_cql::{CqlConfig, CqlStore};

mod classes;
mod clock;
mod cluster;
mod conformance;
mod errors;
mod history;
mod import;
mod limits;
mod listing;
mod passes;
mod records;
mod ring;
mod rows;
mod sealed;
mod tls;

/// The `host:port` in `TEST_CQL`; a test that needs it fails without it (it was run with `--include-ignored`).
pub fn cluster() -> String {
    std::env::var("TEST_CQL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .expect("this test needs a cluster: set TEST_CQL=host:port (e.g. 127.0.0.1:9042)")
}

/// The keyspace shared by this test binary.
pub fn keyspace() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| format!("saltblob_it_{:012x}", rand::random::<u64>() >> 16))
}

/// The keyspace of the limits tests: `reclaim_all` there cannot cut the grace period of the shared one.
pub fn limits_keyspace() -> String {
    format!("{}_limits", keyspace())
}

/// A URL for the shared keyspace with extra `options` (`key=value&...`, may be empty).
pub fn url(options: &str) -> String {
    url_of(keyspace(), options)
}

/// A URL for `keyspace` with extra `options`.
pub fn url_of(keyspace: &str, options: &str) -> String {
    let host = cluster();
    format!("cql://{host}/{keyspace}?rf=1&{options}")
}

/// Connects to the shared keyspace.
pub async fn connect(options: &str) -> CqlStore {
    connect_to(keyspace(), options).await
}

/// Connects to `keyspace`. Connections are serialized so that only the first creates a keyspace's schema.
pub async fn connect_to(keyspace: &str, options: &str) -> CqlStore {
    static SETUP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _guard = SETUP.lock().await;
    let url = url_of(keyspace, options);
    let config = CqlConfig::from_url(&url).expect("test URL parses");
    CqlStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// A conformance fixture on the shared keyspace.
pub async fn fixture() -> Fixture {
    Fixture::new(Arc::new(connect("").await))
}
