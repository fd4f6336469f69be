//! Integration tests against a real Cassandra or ScyllaDB: run with `TEST_CQL=127.0.0.1:9042` (start a node
//! with `scripts/cassandra.sh start1`). Without it every test returns early with a note.
//!
//! All tests of this binary share one keyspace, `saltblob_it_<random>`, created by the first test to connect;
//! the conformance cases use random key prefixes of their own.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, OnceLock};

use saltblob_core::conformance::Fixture;
use saltblob_cql::{CqlConfig, CqlStore};

/// Returns early from the test, with a note, unless `TEST_CQL` names a cluster.
macro_rules! maybe_skip {
    () => {
        if $crate::cluster().is_none() {
            eprintln!("skipped: set TEST_CQL=host:port (e.g. 127.0.0.1:9042) to run this test against a real cluster");
            return;
        }
    };
}

mod cluster;
mod conformance;
mod errors;
mod history;
mod import;
mod limits;
mod records;
mod tls;

/// The `host:port` in `TEST_CQL`, if set.
pub fn cluster() -> Option<String> {
    std::env::var("TEST_CQL")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// The keyspace shared by this test binary.
pub fn keyspace() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| format!("saltblob_it_{:012x}", rand::random::<u64>() >> 16))
}

/// A URL for the shared keyspace with extra `options` (`key=value&...`, may be empty).
pub fn url(options: &str) -> String {
    let host = cluster().unwrap_or_default();
    format!("cql://{host}/{}?rf=1&{options}", keyspace())
}

/// Connects to the shared keyspace. Connections are serialized so that only the first creates the schema.
pub async fn connect(options: &str) -> CqlStore {
    static SETUP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _guard = SETUP.lock().await;
    let config = CqlConfig::from_url(&url(options)).expect("test URL parses");
    CqlStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", url(options)))
}

/// A conformance fixture on the shared keyspace.
pub async fn fixture() -> Fixture {
    Fixture::new(Arc::new(connect("").await))
}
