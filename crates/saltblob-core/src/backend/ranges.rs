//! Scan ranges: how a backend splits its manifests for a pass over the whole store, in no key order
//! ([`crate::backend::ChunkStore::manifest_ranges`], [`crate::backend::ChunkStore::scan_manifest_range`]): opaque range descriptors
//! ([`ScanRange`]) that a caller can keep and resume from, how many to read at once ([`ScanPlan`]), and one page
//! of a range ([`RangePage`]); and what a check of a backend's own index of the manifests' keys found
//! ([`IndexCheck`], [`crate::backend::ChunkStore::check_index`]).

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

/// What [`crate::backend::ChunkStore::check_index`] found: a backend's own index of the manifests' keys (the CQL
/// backend's listing index) compared with the manifests, both ways.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexCheck {
    /// The index's name, for reports (e.g. `listing index`).
    pub name: String,
    /// Manifests whose key was looked up in the index.
    pub manifests: u64,
    /// Index entries read.
    pub entries: u64,
    /// Keys whose manifest is present (the same one before and after the index was read) and which the index
    /// lacks: a listing does not show them. In key order.
    pub missing: Vec<Bytes>,
    /// How many of [`IndexCheck::missing`] a repairing check wrote back into the index.
    pub restored: u64,
    /// Index entries whose manifest is absent, older than the commit window: listings skip them (and remove them
    /// as they come across them), so they cost reads, not correctness.
    pub stale: u64,
    /// How many of [`IndexCheck::stale`] a repairing check removed.
    pub stale_removed: u64,
}
