//! Scan ranges: how a backend splits its manifests for a pass over the whole store, in no key order
//! ([`crate::backend::ChunkStore::manifest_ranges`], [`crate::backend::ChunkStore::scan_manifest_range`]): opaque range descriptors
//! ([`ScanRange`]) that a caller can keep and resume from, how many to read at once ([`ScanPlan`]), and one page
//! of a range ([`RangePage`]).

use bytes::Bytes;

/// One part of the manifests that a pass reads on its own, from [`crate::backend::ChunkStore::manifest_ranges`]. Opaque to the
/// core: bytes the backend made and reads back (a caller may store them, e.g. in a resume file, and hand them
/// back to the same backend later). The empty descriptor is [`ScanRange::ordered`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScanRange(Bytes);

impl ScanRange {
    /// The whole manifest namespace in key order: the one range of a backend that does not split, which the core
    /// reads with [`crate::backend::ChunkStore::scan_records`] (never with [`crate::backend::ChunkStore::scan_manifest_range`]).
    pub fn ordered() -> Self {
        Self(Bytes::new())
    }

    /// Whether this is [`ScanRange::ordered`].
    pub fn is_ordered(&self) -> bool {
        self.0.is_empty()
    }

    /// The range a backend describes by `bytes` (empty: [`ScanRange::ordered`]).
    pub fn from_bytes(bytes: impl Into<Bytes>) -> Self {
        Self(bytes.into())
    }

    /// The descriptor's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// How a backend splits its manifests for a pass ([`crate::backend::ChunkStore::manifest_ranges`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanPlan {
    /// Disjoint ranges that hold every manifest between them.
    pub ranges: Vec<ScanRange>,
    /// How many ranges the backend serves well at once (at least 1): e.g. a few per node of a cluster.
    pub in_flight: usize,
}

impl ScanPlan {
    /// One range, [`ScanRange::ordered`], read alone: the plan of a backend that does not split.
    pub fn ordered() -> Self {
        Self {
            ranges: vec![ScanRange::ordered()],
            in_flight: 1,
        }
    }
}

/// One page of a range, from [`crate::backend::ChunkStore::scan_manifest_range`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangePage {
    /// (key, manifest record) pairs, in the range's own order.
    pub records: Vec<(Bytes, Bytes)>,
    /// Whether the range is over: no record of it follows the last one here. A page that is not the last may be
    /// short, even empty.
    pub done: bool,
}
