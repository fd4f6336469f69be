//! The conformance suite against RocksDB on a real directory (one fresh database per case).

use std::sync::Arc;

use saltblob_core::conformance::Fixture;
use saltblob_rocksdb::{RocksConfig, RocksStore};

pub async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = RocksStore::open(RocksConfig::new(dir.path())).expect("open RocksDB");
    Fixture {
        backend: Arc::new(store),
        guard: Box::new(dir),
    }
}

saltblob_core::conformance_suite!(fixture());
