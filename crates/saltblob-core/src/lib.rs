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
//! Each module uses only those listed before it (`scripts/module-cycles.py`, run by the test command, fails on
//! any import cycle). From the leaves up:
//! - [`units`]: [`KIB`], [`MIB`], [`parse_size`], durations in µs; `timing.rs`: every timing assumption of the
//!   protocols (commit window, clock margin, commit and takeover holds).
//! - [`version`]: [`VersionId`]; `shown.rs`: keys and URLs as printed; [`error`]: [`Error`].
//! - [`clock`]: [`Clock`], the time a store reads for leases, grace periods and version ids.
//! - [`codec`], `decode.rs` (the one bounds-checked record decoder), `retry.rs` (the one retry policy,
//!   [`Error::retries_exhausted`]), `running.rs` (the puts of a store running in this process).
//! - [`backend`]: [`ChunkStore`], the trait a storage engine implements, and its contract; [`layer`]:
//!   [`ChunkStoreLayer`], the forwarding base every wrapper of a [`ChunkStore`] is written on.
//! - [`layout`]: the layout policy (inline, one partition, salted fan-out), chunk/salt/range arithmetic and
//!   [`ByteRange`]; [`manifest`]: the versioned on-disk format (`docs/format.md`).
//! - [`schedule`]: priority classes ([`PriorityClass`], [`SchedulerConfig`]) and the scheduler every backend
//!   request of a store passes through; [`config`]: [`StoreConfig`], [`PutOptions`], [`GetOptions`].
//! - `state.rs`: the store's state shared by every protocol (backend, configuration, scheduler, manifest
//!   reads, the one paged scan of records, chunk batches).
//! - `intent/`: the intent lease a chunked put holds while it writes, which tells gc a put in flight from an
//!   abandoned one; `liveness.rs`: the one rule for whether a version's chunks are still needed.
//! - [`reclaim`]: the reclaim queue of replaced, deleted and abandoned versions, and the reclaim pass;
//!   [`gc`]: garbage collection ([`BlobStore::gc`]); [`fsck`]: the consistency check ([`BlobStore::fsck`]).
//! - [`store`]: [`BlobStore`], the API: each method hands over to a protocol (`store/write.rs`,
//!   `store/read.rs`, `store/segments.rs`, [`reclaim`], [`gc`], [`fsck`]).
//! - [`census`]: [`BlobStore::census`], the store's blobs counted by size, layout and partitions; [`plan`]:
//!   the blast radius of a layout policy on a cluster shape or a live ring (`saltblob plan`).
//! - [`relayout`]: [`BlobStore::relayout`], a blob rewritten under the store's policy, conditional on the version
//!   read.
//! - [`memory`]: [`MemoryStore`], the in-memory reference backend.
//! - `conformance` (feature `conformance`): the suite of behaviour every backend must pass.

pub mod backend;
pub mod buffers;
pub mod census;
pub mod clock;
pub mod codec;
pub mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
mod decode;
pub mod encryption;
pub mod error;
pub mod fsck;
pub mod gc;
mod intent;
pub mod layer;
pub mod layout;
mod liveness;
pub mod manifest;
pub mod memory;
pub mod plan;
pub mod reclaim;
pub mod relayout;
mod retry;
mod running;
pub mod schedule;
mod shown;
mod state;
pub mod store;
mod timing;
pub mod units;
pub mod version;

pub use backend::{
    BackendInfo, BlobRef, ChunkAddress, ChunkId, ChunkRecord, ChunkStore, ChunkWrite, GroupChunks,
    GroupWrite, Namespace, Precondition, Previous, RecordChange, RecordWrite, RecordsPlan,
    SpaceReport,
};
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
pub use manifest::{Manifest, ManifestBody, Segment};
pub use memory::MemoryStore;
pub use reclaim::ReclaimReport;
pub use relayout::Relaid;
pub use retry::{Backoff, Jitter, Retry};
pub use schedule::{ClassStats, PriorityClass, SchedulerConfig, SchedulerStats};
pub use shown::{escape_key, redact_url, unescape_key};
pub use store::{BlobStore, BlobStream, Description, ListEntry, ListPage, MAX_KEY_LEN, Rekeyed};
pub use units::{KIB, MIB, parse_duration, parse_size};
pub use version::{ParseVersionError, VersionId};
