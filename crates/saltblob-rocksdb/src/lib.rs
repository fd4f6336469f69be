//! # saltblob on RocksDB
//!
//! The embedded backend of saltblob: one directory on one machine. The chunks of small and medium blobs are kept
//! in RocksDB blob files (key-value separation), so they do not churn the LSM tree; a large blob's chunks go to
//! an extent file of its version's own, written once with aligned direct I/O, with RocksDB as its index.
//! Manifests and internal records live in small column families of their own.
//!
//! ```no_run
//! use std::sync::Arc;
//! use saltblob_core::{BlobStore, PutOptions, StoreConfig};
//! use saltblob_rocksdb::{RocksConfig, RocksStore};
//!
//! # #[tokio::main] async fn main() -> saltblob_core::Result<()> {
//! let backend = RocksStore::open(RocksConfig::from_url("rocksdb:///var/lib/saltblob")?)?;
//! let store = BlobStore::new(Arc::new(backend), StoreConfig::default())?;
//! store.put("hello", &b"world"[..], &PutOptions::new()).await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//! In OpenDAL's service layout. Each module uses only those listed before it (no import circles):
//! - [`config`]: [`RocksConfig`] and its `rocksdb://` URL.
//! - [`error`]: mapping of RocksDB errors (kept as the source), and the backend's name.
//! - [`keys`]: storage key encoding.
//! - `blob_files`: at open, removal of the blob files a crashed process left unfinished.
//! - `commit_gate`: the count of synced writes in progress, for which extent I/O stands back.
//! - `core`: the thin engine wrapper: open and format check, the engine calls on column families and keys,
//!   lock stripes of conditional writes, chunk write priorities, the flush of unlogged chunks, compaction.
//! - `extent`: extent files, the chunk records of large versions in files of their own, written with aligned
//!   direct I/O (`extent/format.rs`: names, header, pointers; `extent/io.rs`: aligned buffers, `O_DIRECT`,
//!   `fallocate`; `extent/writer.rs`: one version's writer).
//! - `backup`: consistent copies of the store while it serves (a checkpoint and links of the extent files).
//! - [`backend`]: [`RocksStore`], the [`saltblob_core::ChunkStore`] implementation on top of `core`.

pub mod backend;
mod backup;
mod blob_files;
mod commit_gate;
pub mod config;
mod core;
pub mod error;
mod extent;
pub mod keys;

pub use backend::RocksStore;
pub use config::{BlobCompression, RocksConfig, SCHEME};
