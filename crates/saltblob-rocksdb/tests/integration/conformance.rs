//! The conformance suite against RocksDB on a real directory (one fresh database per case): with the default
//! configuration, then with every chunked put in an extent file (`extent_min_bytes=0`); each also with every
//! store sealing its puts (encryption at rest).

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

/// Every case again, with every store sealing its puts (encryption at rest).
mod sealed {
    use super::fixture;

    saltblob_core::conformance_suite!(sealed fixture());
}

/// Every chunked put in an extent file of its version's own, written in I/O buffers (and backend calls) of
/// 64 KiB, the smallest: the suite's blobs are small (4 KiB chunks, limits of 100 KiB), and a case that holds
/// chunk writes needs some issued before its put fails.
mod extents {
    use super::*;

    pub async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut config = RocksConfig::new(dir.path());
        config.extent_min_bytes = Some(0);
        // Batches smaller than the suite's values, so that a read spans several (the grace case reclaims a
        // version under a reader that has taken its first batch only).
        config.extent_io_bytes = 64 << 10;
        config.extent_read_bytes = 64 << 10;
        let store = RocksStore::open(config).expect("open RocksDB");
        Fixture {
            backend: Arc::new(store),
            guard: Box::new(dir),
        }
    }

    saltblob_core::conformance_suite!(fixture());

    /// Every case again on extent files, with every store sealing its puts.
    mod sealed {
        use super::fixture;

        saltblob_core::conformance_suite!(sealed fixture());
    }
}
