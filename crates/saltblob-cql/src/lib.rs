//! # saltblob on ScyllaDB or Apache Cassandra
//!
//! The cluster backend of saltblob, over CQL with the official `scylla` driver (token-aware; shard-aware on
//! ScyllaDB). Chunks of one version are spread over `salt_count` partitions `(key, version, salt)`, which land on
//! different nodes and are written and read in parallel; manifests and internal records live in small tables
//! of their own. Everything above the [`saltblob_core::ChunkStore`] trait — layout, codecs, checksums,
//! versioning, streaming — is the core's, so this backend behaves exactly like the embedded one.
//!
//! ```no_run
//! use std::sync::Arc;
//! use saltblob_core::{BlobStore, PutOptions, StoreConfig};
//! use saltblob_cql::{CqlConfig, CqlStore};
//!
//! # #[tokio::main] async fn main() -> saltblob_core::Result<()> {
//! let config = CqlConfig::from_url("cql://10.0.0.1,10.0.0.2:9042/media?rf=3&consistency=local_quorum")?;
//! let store = BlobStore::new(Arc::new(CqlStore::connect(config).await?), StoreConfig::default())?;
//! store.put("videos/cat.mp4", vec![7u8; 60 << 20], &PutOptions::new()).await?;
//! # Ok(()) }
//! ```
//!
//! # Behaviour worth knowing
//! - **Limits**: chunks are at most 8 MiB ([`backend::MAX_CHUNK_BYTES`]), so no request or mutation approaches
//!   Cassandra's 16 MiB limits; a larger chunk size is refused by the core with a clear error.
//! - **Batching**: chunks of one partition go in unlogged batches of at most [`CqlConfig::batch_bytes`]
//!   (32 KiB, below Cassandra's 50 KiB `batch_size_fail_threshold`); a larger chunk (64 KiB by default) is one
//!   insert. Every partition of a call is written concurrently.
//! - **Backpressure**: chunk writes in flight to one node are bounded per priority class
//!   ([`CqlConfig::inflight_per_host`], [`CqlConfig::bulk_inflight_per_host`]); more wait, and background writes
//!   never take the budget of interactive ones. Idempotent requests are retried on timeouts, unavailable
//!   replicas, overload and broken connections. Chunk reads have no per-host budget: the core's scheduler
//!   bounds them by class.
//! - **Commit order**: plain writes carry a client timestamp from a strictly increasing process clock, so of
//!   two commits the later wins. Conditional puts are lightweight transactions (slower: four round trips).
//! - **TLS**: `tls=true&ca=FILE` (and `cert=FILE&key=FILE` for a client certificate) connect through rustls,
//!   trusting only that CA; each node's certificate must name its IP address ([`tls`]).
//! - **Listing** reads the listing index ([`listing`]): keys in range partitions that split as they grow, kept
//!   with each manifest write by its timestamp, so that a page reads a bounded number of rows whatever the number
//!   of keys (see `docs/format.md`, "Listing index"); internal namespaces are range scans. A keyspace written by
//!   an earlier build gets its index from `saltblob upgrade` ([`CqlStore::upgrade`]).
//! - **Passes** over every blob (census, fsck, gc's expiry, relayout) read the manifest table by token ranges,
//!   several at once, each from one of its replicas (module `ranges`).
//!
//! # Layout
//! Each module uses only those listed before it (no import circles):
//! - [`clock`]: the strictly increasing client-timestamp clock of plain writes.
//! - [`error`]: mapping of driver errors (kept as the source), with retryability and explanations.
//! - [`tls`]: TLS options, the rustls client configuration built from their PEM files, handshake diagnosis.
//! - [`config`]: [`CqlConfig`] and its `cql://` URL.
//! - [`schema`]: the keyspace and tables, and their creation.
//! - `statements`: the prepared statements and the values they bind.
//! - `directory`: the listing index's directory as a process holds it, and the tallies of its ranges' rows.
//! - `session`: the session and its bootstrap (data center, schema, statements, format marker); running
//!   requests with retries.
//! - `lwt`: lightweight transactions and their settling against the client clock.
//! - [`listing`]: the listing index: its reads and writes, splits (`listing/split.rs`), and its build from the
//!   manifests and repair (`listing/build.rs`), its stale rows (`listing/stale.rs`).
//! - `scan`: record scans (the manifests in key order through the index; range reads of the other namespaces).
//! - `ranges`: the token ranges of the manifest table for passes over every blob, and their reads.
//! - `index_check`: the listing index compared with the manifests, both ways, for `fsck` (and its repair).
//! - `writer`: chunk writes, cut into per-partition requests under per-host, per-class backpressure.
//! - `reader`: chunk reads, cut into per-partition requests (a slice of consecutive indexes or an `IN` list).
//! - [`backend`]: [`CqlStore`], the [`saltblob_core::ChunkStore`] implementation.
//! - `ring`: the ring of the store's keyspace as the driver sees it (nodes, replicas per token range), for
//!   `saltblob plan`.
//! - [`import`]: import of tables in the salting article's original schema (a folder: one file per job).

pub mod backend;
pub mod clock;
pub mod config;
mod directory;
pub mod error;
pub mod import;
mod index_check;
pub mod listing;
mod lwt;
mod ranges;
mod reader;
mod ring;
mod scan;
pub mod schema;
mod session;
mod statements;
pub mod tls;
mod writer;

pub use backend::{CqlStore, Upgraded};
pub use config::{CqlConfig, Credentials, ListingConfig, SCHEME};
pub use scylla::statement::{Consistency, SerialConsistency};
pub use tls::{ClientCertificate, TlsOptions};
pub use writer::WriteBudget;
