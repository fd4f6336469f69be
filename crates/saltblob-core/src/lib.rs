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
//! One module per protocol; dependencies run one way: the API, then the protocols, then the base they share,
//! then the backend trait.
//! - [`store`]: [`BlobStore`], the API. Each method checks its input once and hands over to a protocol:
//!   `store/write.rs` (a put: pre-check, intent lease, chunks through `store/chunk_writer.rs`, commit; and
//!   delete), `store/read.rs` (streaming reads, [`BlobStream`]), [`reclaim`], [`gc`] or [`fsck`].
//! - [`gc`]: garbage collection ([`BlobStore::gc`]): takes over the intents of abandoned puts, then runs a
//!   reclaim pass.
//! - [`fsck`]: the consistency check ([`BlobStore::fsck`]); reads blobs through `store/read.rs`.
//! - [`reclaim`]: the reclaim queue of replaced, deleted and abandoned versions, and the reclaim pass.
//! - `intent.rs`: the intent lease a chunked put holds while it writes, which tells gc a put in flight from an
//!   abandoned one.
//! - `records.rs`: the shared base: the store's state, manifest reads, the one paged scan of records, the
//!   low-water marks.
//! - [`backend`]: [`ChunkStore`], the trait a storage engine implements, and its contract.
//! - [`layout`]: the layout policy (inline, one partition, salted fan-out), chunk/salt/range arithmetic and
//!   [`ByteRange`].
//! - [`manifest`], [`codec`]: the versioned on-disk format (`docs/format.md`).
//! - [`clock`]: [`Clock`], the time a store reads for leases, grace periods and version ids.
//! - [`config`]: [`StoreConfig`], [`PutOptions`] and [`parse_size`]; [`error`]: [`Error`]; [`version`]:
//!   [`VersionId`].
//! - [`schedule`]: priority classes ([`PriorityClass`], [`SchedulerConfig`]) and the scheduler every backend
//!   request of a store passes through.
//! - [`memory`]: [`MemoryStore`], the in-memory reference backend.
//! - `conformance` (feature `conformance`): the suite of behaviour every backend must pass.

pub mod backend;
pub mod clock;
pub mod codec;
pub mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod error;
pub mod fsck;
pub mod gc;
mod intent;
pub mod layer;
pub mod layout;
pub mod manifest;
pub mod memory;
pub mod reclaim;
mod records;
pub mod schedule;
mod shown;
pub mod store;
pub mod version;

pub use backend::{
    BackendInfo, BlobRef, ChunkAddress, ChunkId, ChunkStore, ChunkWrite, Namespace, Precondition,
    Previous, RecordWrite, SpaceReport,
};
#[cfg(feature = "conformance")]
pub use clock::OffsetClock;
pub use clock::{Clock, SystemClock};
pub use codec::Codec;
pub use config::{GetOptions, LateMetadata, PutCondition, PutOptions, StoreConfig, parse_size};
pub use error::{BoxError, Error, KeyDisplay, Result};
pub use fsck::{Damage, FsckOptions, FsckReport, Orphan, OrphanReason};
pub use gc::{GcHandle, GcOptions, GcReport};
pub use layer::ChunkStoreLayer;
pub use layout::{ByteRange, ChunkLayout, Layout, LayoutPolicy};
pub use manifest::{Manifest, ManifestBody, Segment};
pub use memory::MemoryStore;
pub use reclaim::ReclaimReport;
pub use schedule::{ClassStats, PriorityClass, SchedulerConfig, SchedulerStats};
pub use shown::{escape_key, redact_url, unescape_key};
pub use store::{BlobStore, BlobStream, Description, ListEntry, MAX_KEY_LEN};
pub use version::VersionId;
