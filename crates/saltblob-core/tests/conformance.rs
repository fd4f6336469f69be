//! The conformance suite against the in-memory reference backend.

use std::sync::Arc;

use saltblob_core::MemoryStore;
use saltblob_core::conformance::Fixture;

saltblob_core::conformance_suite!(async { Fixture::new(Arc::new(MemoryStore::new())) });

/// Every case again, with every store sealing its puts (encryption at rest).
mod sealed {
    use super::*;

    saltblob_core::conformance_suite!(sealed async { Fixture::new(Arc::new(MemoryStore::new())) });
}

/// Every case again on a store that writes atomic groups of records, as RocksDB does: puts commit with one group
/// (reclaim entries, manifest, intent removal) instead of a claim and three writes.
mod atomic_groups {
    use super::*;

    saltblob_core::conformance_suite!(async {
        Fixture::new(Arc::new(MemoryStore::with_atomic_record_groups()))
    });
}
