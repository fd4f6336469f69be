//! # saltblob core
//!
//! One key-value API for values of any size, from a few bytes to many gigabytes. This crate holds everything
//! that does not depend on a storage engine: the [`BlobStore`] API, the layout policy, the manifest and chunk
//! format, codecs, the [`ChunkStore`] backend trait, an in-memory backend ([`MemoryStore`]) and, behind the
//! `conformance` feature, the conformance suite every backend runs.
//!
//! ```
//! use std::sync::Arc;
//! use saltblob_core::{BlobStore, MemoryStore, PutOptions, StoreConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> saltblob_core::Result<()> {
//! let store = BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default())?;
//! let big = vec![7u8; 20 << 20]; // 20 MiB: chunked and fanned out over 100 salts
//! let m = store.put("videos/cat.mp4", big.clone(), &PutOptions::new()).await?;
//! assert_eq!(store.get("videos/cat.mp4").await?, big);
//! assert_eq!(store.get_range("videos/cat.mp4", 10..20).await?, &big[10..20]);
//! let d = store.describe("videos/cat.mp4").await?;
//! assert_eq!((d.layout_kind, d.bytes_per_salt.len()), ("salted", 100));
//! assert_eq!(store.delete("videos/cat.mp4").await?, Some(m.version));
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//! The crate is laid out by layer, one folder a layer; each uses only those listed before it
//! (`scripts/module-cycles.py`, run by the test command, fails on an import cycle between files, and between
//! folders counted as one module each, and on a list here out of that order). From the bottom up:
//! - `base/`: what every layer uses: the error type ([`Error`]), units ([`KIB`], [`parse_size`],
//!   [`parse_duration`]), version ids ([`VersionId`]), the clock ([`Clock`]), the timing assumptions of the
//!   protocols, how a failed step is tried again in every crate ([`Backoff`]), how keys are shown, reusable buffers.
//! - [`encryption`]: encryption at rest: key providers, the keyring, data keys and their cache, the AEAD.
//! - `format/`: the bytes saltblob stores: the record decoder, the chunk format ([`codec`]), the layout policy
//!   and chunk arithmetic ([`layout`]), the manifest ([`manifest`]); `docs/format.md` is its specification.
//! - [`backend`]: the contract of a storage engine ([`ChunkStore`]), the forwarding base of its wrappers
//!   ([`ChunkStoreLayer`]) and the in-memory reference backend ([`MemoryStore`]).
//! - [`schedule`]: priority classes and the scheduler every backend request of a store passes through.
//! - `state/`: a store's configuration ([`StoreConfig`], [`PutOptions`], [`GetOptions`]) and the state every
//!   protocol shares (the scheduled backend, manifest reads, scans, the puts running in this process).
//! - `ledger/`: the store's records beside its manifests: the intent of a put in flight, the reclaim queue of
//!   replaced versions (and its pass), and the one rule of whether a version's chunks are still needed.
//! - [`store`]: [`BlobStore`], the API, and its protocols: a put, a read, a delete, segments, and the one commit
//!   primitive every change of a manifest goes through (`store/commit.rs`).
//! - `upkeep/`: what runs beside the API: garbage collection ([`gc`]) and the consistency check ([`fsck`]).
//! - `policy/`: the store's content against its layout policy: [`census`], the blast radius of a policy
//!   ([`plan`]), [`relayout`].
//! - `conformance/` (feature `conformance`): the suite of behaviour every backend must pass.

pub mod backend;
mod base;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod encryption;
mod format;
mod ledger;
mod policy;
pub mod schedule;
mod state;
pub mod store;
mod upkeep;

pub use backend::{layer, memory};
pub use base::{buffers, clock, error, fds, units, version};
pub use format::{codec, layout, manifest};
pub use ledger::reclaim;
pub use policy::{census, plan, relayout};
pub use state::config;
pub use upkeep::{fsck, gc};

pub use backend::{
    BackendInfo, BackupOptions, BackupReport, BlobRef, ChunkAddress, ChunkId, ChunkRecord,
    ChunkStore, ChunkWrite, GroupChunks, GroupWrite, IndexCheck, Namespace, Precondition, Previous,
    RangePage, RecordChange, RecordWrite, RecordsPlan, ScanPlan, ScanRange, SpaceReport,
};
pub use base::retry::{Backoff, Jitter, Retry};
pub use base::shown::{escape_key, redact_url, unescape_key};
pub use census::{Census, LayoutClass, SizeHistogram, Tally};
#[cfg(feature = "conformance")]
pub use clock::OffsetClock;
pub use clock::{Clock, SystemClock};
pub use codec::Codec;
pub use config::{GetOptions, LateMetadata, PutCondition, PutOptions, StoreConfig};
pub use encryption::EncryptionConfig;
pub use error::{BoxError, Error, KeyDisplay, Result};
pub use fsck::{Damage, FsckOptions, FsckReport, Orphan, OrphanReason, Unverified};
pub use gc::{GcHandle, GcOptions, GcReport};
pub use layer::ChunkStoreLayer;
pub use layout::{ByteRange, ChunkLayout, Layout, LayoutPolicy};
pub use ledger::turns::{MAX_TURN_NAME, MAX_TURN_TOKEN, Turn};
pub use manifest::{Manifest, ManifestBody, Segment};
pub use memory::MemoryStore;
pub use reclaim::ReclaimReport;
pub use relayout::Relaid;
pub use schedule::{ClassStats, PriorityClass, SchedulerConfig, SchedulerStats};
pub use store::pass::{PassEntry, PassEvent, PassOptions, PassPage, PassProgress, RangeState};
pub use store::{
    BlobStore, BlobStream, Description, KeyVersion, ListEntry, ListPage, MAX_KEY_LEN, Rekeyed,
    RemovedVersion,
};
pub use units::{KIB, MIB, parse_duration, parse_size};
pub use version::{ParseVersionError, VersionId};
