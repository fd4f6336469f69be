//! [`CqlStore`]: the [`ChunkStore`] implementation on ScyllaDB or Apache Cassandra.
//!
//! The store is a `Cluster` (session, bootstrap, retries: module `session`) plus the per-host, per-class
//! `Throttle` of chunk writes (module `writer`). Record scans are in module `scan`, the token ranges of passes
//! over every manifest in `ranges`, conditional writes in `lwt`, write timestamps in [`crate::clock`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use saltblob_core::backend::{
    BackendInfo, BlobRef, ChunkAddress, ChunkId, ChunkSink, ChunkStore, ChunkWrite, IndexCheck,
    Namespace, PlainSink, Precondition, Previous, RangePage, RecordWrite, ScanPlan, ScanRange,
    SinkPlan, deadline,
};
use saltblob_core::version::VersionId;
use saltblob_core::{Error, KeyDisplay, Result};
use scylla::client::session::Session;

use crate::clock::next_timestamp;
use crate::config::CqlConfig;
use crate::error::{self, NAME};
use crate::listing::{self, BuildReport, BuildSteps, Directory, SplitReport};
use crate::schema::{SCHEMA_FORMAT, SCHEMA_FORMAT_1};
use crate::session::{Cluster, Formats};
use crate::statements::{V, key_values};
use crate::writer::{self, Lane, Throttle, WriteBudget};
use crate::{lwt, ranges, reader, scan};

/// Largest encoded chunk accepted: 8 MiB, half of Cassandra's largest mutation (16 MiB with the default 32 MiB
/// commit log segment) and of its largest request frame (`native_transport_max_frame_size`, 16 MiB).
pub const MAX_CHUNK_BYTES: u32 = 8 << 20;
/// Largest number of encoded chunk bytes in one `put_chunks`/`get_chunks` call. It is split into requests of
/// at most one chunk or one batch each; it also bounds one read response.
pub const MAX_BATCH_BYTES: usize = 4 << 20;
/// Chunk size preferred for large blobs ([`BackendInfo::large_chunk_size`]): a row costs Cassandra about as much
/// as tens of KiB of data, so large blobs get 1 MiB rows (measured: `docs/bench/journal/cassandra.md`, "Bigger
/// rows on Cassandra").
pub const LARGE_CHUNK_SIZE: u32 = 1 << 20;
/// Concurrent partition deletes of one `delete_chunks` call.
const DELETE_CONCURRENCY: usize = 32;

/// The cluster backend: Cassandra or ScyllaDB over CQL.
///
/// Tables (see `docs/format.md`): `manifests` (blob key → manifest), `chunks` (partition (key, version, salt),
/// row per chunk index) and `records` (partition per namespace, rows in key order). Writes carry client
/// timestamps from one strictly increasing process clock, so the later of two commits wins; conditional
/// writes are lightweight transactions. Chunk writes are bounded per host and priority class
/// ([`CqlConfig::inflight_per_host`], [`CqlConfig::bulk_inflight_per_host`]): a put that outruns the cluster
/// waits instead of failing, and background writes never take the budget of interactive ones.
pub struct CqlStore {
    pub(crate) cluster: Cluster,
    throttle: Throttle,
    /// Chunk read requests sent (not counting retries).
    chunk_reads: AtomicU64,
}

/// What [`CqlStore::upgrade`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upgraded {
    /// The keyspace's schema format before.
    pub from: u8,
    /// Its format now.
    pub to: u8,
    /// What the build of the listing index did.
    pub report: BuildReport,
}

impl std::fmt::Debug for CqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqlStore")
            .field("hosts", &self.cluster.config.hosts)
            .field("keyspace", &self.cluster.config.keyspace)
            .field("datacenter", &self.cluster.datacenter)
            .finish()
    }
}

impl CqlStore {
    /// Connects to the cluster, creates the keyspace and tables if missing (waiting for schema agreement) and
    /// checks the schema format.
    ///
    /// Fails with a clear error, before creating anything, when no host answers within the connect timeout,
    /// when the data center is ambiguous or unknown, or when an explicit replication factor exceeds the data
    /// center's node count.
    pub async fn connect(config: CqlConfig) -> Result<Self> {
        let cluster = Cluster::connect(config).await?;
        let throttle = Throttle::new(&cluster.config);
        Ok(Self {
            cluster,
            throttle,
            chunk_reads: AtomicU64::new(0),
        })
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &CqlConfig {
        &self.cluster.config
    }

    /// The chunk-write budgets used so far, one per host and priority class, sorted by host then class (for
    /// diagnostics and tests).
    pub fn write_budgets(&self) -> Vec<WriteBudget> {
        self.throttle.snapshot()
    }

    /// The chunk read requests sent so far, retries not counted (for diagnostics and tests): `get_chunks` sends
    /// one per run of consecutive indexes of a partition, plus one per partition for its other indexes.
    pub fn chunk_read_requests(&self) -> u64 {
        self.chunk_reads.load(Ordering::Relaxed)
    }

    /// The data center requests go to.
    pub fn datacenter(&self) -> &str {
        &self.cluster.datacenter
    }

    /// What every cluster store says of itself ([`ChunkStore::info`]), known without connecting (for tools
    /// that model a cluster, such as `saltblob plan`).
    pub fn backend_info() -> BackendInfo {
        BackendInfo::new(NAME, MAX_CHUNK_BYTES, MAX_BATCH_BYTES, false)
            .with_large_chunk_size(LARGE_CHUNK_SIZE)
            .with_max_partition_bytes(saltblob_core::layout::DEFAULT_MAX_PARTITION_BYTES)
            .with_internal_retries()
            .with_late_writes()
    }

    /// The driver session (for tools and tests that need plain CQL).
    pub fn session(&self) -> &Session {
        &self.cluster.session
    }

    /// Brings the keyspace of `config`, written by an earlier build, to this build's schema format: from format 1
    /// builds the listing index from its manifests; from format 2 there is nothing to build (the partitioned table
    /// is created at connect; the intents and reclaim entries of format 2 stay where they are and are drained from
    /// there). On a keyspace of this format already, repairs the index instead (rows added for every manifest,
    /// stale rows removed), as `reconcile` asks on format 2. Resumable: run again after an interruption. Stop the
    /// store's writers of the earlier format first: their writes do not reach the index, and their gc and fsck do
    /// not see this format's intents.
    ///
    /// # Errors
    /// Those of connecting, and store errors (the build resumes where it stopped).
    pub async fn upgrade(config: CqlConfig, reconcile: bool) -> Result<Upgraded> {
        Self::upgrade_in_steps(config, reconcile, BuildSteps::default()).await
    }

    /// [`CqlStore::upgrade`], stopping after the pages `steps` allows as an interrupted upgrade would (the
    /// format stays as it was until a run goes through every manifest): for tests of resumption.
    #[doc(hidden)]
    pub async fn upgrade_in_steps(
        config: CqlConfig,
        reconcile: bool,
        steps: BuildSteps,
    ) -> Result<Upgraded> {
        let (cluster, from) = Cluster::connect_to(config, Formats::Upgradable).await?;
        // Format 1 has no listing index: it is built. Format 2 lacks only the partitioned table, which the
        // connection created: nothing to build (reconciling the index only when asked).
        let first = from == SCHEMA_FORMAT_1;
        let report = if first || reconcile || from == SCHEMA_FORMAT {
            listing::build(&cluster, first, reconcile || !first, steps).await?
        } else {
            BuildReport {
                complete: true,
                ranges: cluster.read_directory().await?.entries.len(),
                ..BuildReport::default()
            }
        };
        let to = if report.complete && from != SCHEMA_FORMAT {
            cluster.write_format(SCHEMA_FORMAT).await?;
            SCHEMA_FORMAT
        } else {
            from
        };
        Ok(Upgraded { from, to, report })
    }

    /// Runs one maintenance of the listing index now (what gc runs after each pass).
    ///
    /// # Errors
    /// Store errors.
    pub async fn maintain_listing(&self) -> Result<SplitReport> {
        listing::maintain(&self.cluster).await
    }

    /// The listing index's directory, read now.
    ///
    /// # Errors
    /// Store errors.
    pub async fn listing_directory(&self) -> Result<Directory> {
        self.cluster.read_directory().await
    }

    /// The reads of the listing index's range partitions so far (for diagnostics, tests and the bench): a listing
    /// page reads one or two per range it covers.
    pub fn listing_reads(&self) -> u64 {
        self.cluster.index_reads.load(Ordering::Relaxed)
    }

    /// The manifests listings have read so far (for diagnostics, tests and the bench): one per key a page shows,
    /// and a spare per four.
    pub fn listed_records(&self) -> u64 {
        self.cluster.listed_records.load(Ordering::Relaxed)
    }

    /// Before a conditional manifest write: the key's index row, with a timestamp of this process's clock;
    /// returns it (`None` for other namespaces).
    async fn index_before_conditional(&self, ns: Namespace, key: &[u8]) -> Result<Option<i64>> {
        if ns != Namespace::Manifest {
            return Ok(None);
        }
        let ts = next_timestamp();
        self.cluster.index_insert(key, ts).await?;
        Ok(Some(ts))
    }

    /// After a conditional manifest write applied, whose write time the cluster chose and the read-back found to
    /// be `written`: the index row again at that time when it is later than the one written before (`indexed`), so
    /// that a delete between the two times removes neither.
    async fn index_after_conditional(
        &self,
        key: &[u8],
        indexed: Option<i64>,
        written: Option<i64>,
    ) -> Result<()> {
        match (indexed, written) {
            (Some(before), Some(at)) if at > before => self.cluster.index_insert(key, at).await,
            _ => Ok(()),
        }
    }

    /// A plain driver session to the cluster of `config`, without touching any keyspace (for tools such as
    /// [`crate::import`]). Fails with a clear error when no host answers within the connect timeout.
    pub async fn open_session(config: &CqlConfig) -> Result<Session> {
        Cluster::open_session(config).await
    }
}

#[async_trait]
impl ChunkStore for CqlStore {
    fn info(&self) -> BackendInfo {
        Self::backend_info()
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        self.cluster.get_record(ns, key).await
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let st = self.cluster.st.records(ns);
        let shown = KeyDisplay::from(key);
        // A write with a deadline ([`deadline`]): refused before anything is written (the index row included),
        // and checked again right before the record's statement is sent.
        deadline::check_current()?;
        match cond {
            Precondition::None => {
                let ts = next_timestamp();
                // The key's index row first, with the manifest's timestamp (see `listing`).
                if ns == Namespace::Manifest {
                    self.cluster.index_insert(key, ts).await?;
                }
                let mut row = key_values(ns, key);
                row.extend([V::Blob(value), V::Big(ts)]);
                let what = || format!("write of {ns:?} record \"{shown}\"");
                self.cluster
                    .run_by_deadline(what, true, || {
                        self.cluster.session.execute_unpaged(&st.put, &row)
                    })
                    .await?;
                Ok(RecordWrite::Done(Previous::Unknown))
            }
            Precondition::Absent => {
                let indexed = self.index_before_conditional(ns, key).await?;
                let mut row = key_values(ns, key);
                row.push(V::Blob(value.clone()));
                let what = format!("conditional (if absent) write of {ns:?} record \"{shown}\"");
                deadline::check_current()?;
                match lwt::execute(&self.cluster, &what, &st.put_if_absent, row).await? {
                    (true, _) => {
                        let ts = lwt::settle(&self.cluster, ns, key, Some(&value), None).await;
                        self.index_after_conditional(key, indexed, ts).await?;
                        Ok(RecordWrite::Done(Previous::Absent))
                    }
                    (false, current) => Ok(RecordWrite::ConditionFailed(current)),
                }
            }
            Precondition::Equals(expected) => {
                let indexed = self.index_before_conditional(ns, key).await?;
                let mut row = vec![V::Blob(value.clone())];
                row.extend(key_values(ns, key));
                row.push(V::Blob(expected.clone()));
                let what = format!("conditional (if equal) write of {ns:?} record \"{shown}\"");
                deadline::check_current()?;
                match lwt::execute(&self.cluster, &what, &st.put_if_equal, row).await? {
                    (true, _) => {
                        let ts =
                            lwt::settle(&self.cluster, ns, key, Some(&value), Some(expected)).await;
                        self.index_after_conditional(key, indexed, ts).await?;
                        Ok(RecordWrite::Done(Previous::Value(expected.clone())))
                    }
                    (false, current) => Ok(RecordWrite::ConditionFailed(current)),
                }
            }
        }
    }

    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let st = self.cluster.st.records(ns);
        let shown = KeyDisplay::from(key);
        match cond.for_delete() {
            Precondition::None | Precondition::Absent => {
                let ts = next_timestamp();
                let mut row = vec![V::Big(ts)];
                row.extend(key_values(ns, key));
                let what = || format!("delete of {ns:?} record \"{shown}\"");
                self.cluster
                    .run_by_deadline(what, true, || {
                        self.cluster.session.execute_unpaged(&st.delete, &row)
                    })
                    .await?;
                // The index row after the manifest, with the delete's timestamp (see `listing`).
                if ns == Namespace::Manifest {
                    self.cluster.index_remove(key, ts).await?;
                }
                Ok(RecordWrite::Done(Previous::Unknown))
            }
            Precondition::Equals(expected) => {
                // The write time of the manifest deleted: its index row goes at that time (the cluster chooses the
                // delete's own), so that a later write of the key, whatever its timestamp, keeps its row.
                let written = match ns {
                    Namespace::Manifest => self.cluster.write_time(ns, key).await?,
                    _ => None,
                };
                let mut row = key_values(ns, key);
                row.push(V::Blob(expected.clone()));
                let what = format!("conditional delete of {ns:?} record \"{shown}\"");
                deadline::check_current()?;
                match lwt::execute(&self.cluster, &what, &st.delete_if_equal, row).await? {
                    (true, _) => {
                        lwt::settle(&self.cluster, ns, key, None, Some(expected)).await;
                        if let Some(ts) = written {
                            self.cluster.index_remove(key, ts).await?;
                        }
                        Ok(RecordWrite::Done(Previous::Value(expected.clone())))
                    }
                    (false, current) => Ok(RecordWrite::ConditionFailed(current)),
                }
            }
        }
    }

    async fn scan_records(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        scan::scan(&self.cluster, ns, prefix, start_after, limit).await
    }

    /// One partition tombstone in the partitioned table, at a timestamp of this process's clock: a later write of
    /// a client whose clock lags this one's may be shadowed by it (the core drops only partitions nobody writes to
    /// any more). Refused (an internal error) for a namespace without partitions or a part of another length.
    async fn drop_partition(&self, ns: Namespace, part: &[u8]) -> Result<()> {
        if ns.partition_len() == 0 || part.len() != ns.partition_len() {
            return Err(Error::internal(
                "drop_partition",
                format!("{ns:?} has no partition of {} bytes", part.len()),
            ));
        }
        let row = vec![
            V::Big(next_timestamp()),
            V::Tiny(i8::from_le_bytes([ns.tag()])),
            V::Blob(Bytes::copy_from_slice(part)),
        ];
        let what = || format!("drop of a partition of {ns:?}");
        self.cluster
            .run(what, true, || {
                self.cluster
                    .session
                    .execute_unpaged(&self.cluster.st.drop_partition, &row)
            })
            .await
            .map(drop)
    }

    /// The ring from the driver's token map, cut into about nodes × shards × 3 token ranges (module `ranges`).
    async fn manifest_ranges(&self) -> Result<ScanPlan> {
        ranges::plan(&self.cluster)
    }

    /// `token(key) > ? AND token(key) <= ?`, paged, from a replica of the range (module `ranges`).
    async fn scan_manifest_range(
        &self,
        range: &ScanRange,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<RangePage> {
        ranges::read(&self.cluster, range, after, limit).await
    }

    /// Chunks are rows, written as they come, each batch cut into per-partition requests: the plain sink. A commit
    /// is one manifest write (a Paxos round only when it is conditional).
    fn chunk_sink(&self, _plan: &SinkPlan) -> Box<dyn ChunkSink> {
        Box::new(PlainSink)
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        let ts = next_timestamp();
        let version = Bytes::copy_from_slice(&blob.version.to_be_bytes());
        let units = writer::plan(blob, chunks, self.cluster.config.batch_bytes);
        let lane = Lane::current();
        // Every partition at once; the per-host, per-class throttle holds back what the cluster cannot take yet.
        futures::future::try_join_all(units.into_iter().map(|u| {
            writer::write_unit(&self.cluster, &self.throttle, blob, &version, ts, &lane, u)
        }))
        .await?;
        Ok(())
    }

    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>> {
        let version = Bytes::copy_from_slice(&blob.version.to_be_bytes());
        let units = reader::plan(chunks)?;
        self.chunk_reads
            .fetch_add(units.len() as u64, Ordering::Relaxed);
        let reads = units
            .iter()
            .map(|unit| reader::read_unit(&self.cluster, blob, &version, unit));
        let mut found: HashMap<(i32, i64), Bytes> = HashMap::new();
        for part in futures::future::try_join_all(reads).await? {
            found.extend(part);
        }
        Ok(chunks
            .iter()
            .map(|c| {
                let at = (i32::try_from(c.salt).ok()?, i64::try_from(c.index).ok()?);
                found.get(&at).cloned()
            })
            .collect())
    }

    async fn delete_chunks(
        &self,
        blob: &BlobRef,
        salt_count: u32,
        _chunk_count: u64,
    ) -> Result<()> {
        let ts = next_timestamp();
        let version = Bytes::copy_from_slice(&blob.version.to_be_bytes());
        let salts = i32::try_from(salt_count)
            .map_err(|_| Error::invalid("salt count", format!("{salt_count} is over 2^31")))?;
        stream::iter(0..salts)
            .map(|salt| {
                let values = (ts, blob.key.clone(), version.clone(), salt);
                async move {
                    let what = || {
                        format!(
                            "delete of salt {salt} of key \"{}\" version {}",
                            KeyDisplay::from(&blob.key[..]),
                            blob.version
                        )
                    };
                    self.cluster
                        .run(what, true, || {
                            self.cluster
                                .session
                                .execute_unpaged(&self.cluster.st.delete_chunks, &values)
                        })
                        .await
                        .map(|_| ())
                }
            })
            .buffer_unordered(DELETE_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// The listing index against the manifests (module `index_check`).
    async fn check_index(&self, prefix: &[u8], repair: bool) -> Result<Option<IndexCheck>> {
        crate::index_check::check(&self.cluster, prefix, repair)
            .await
            .map(Some)
    }

    /// A node's `now()` (`system.local`, millisecond precision) with half the round trip added: the cluster's
    /// time as this process sees it. gc checks it before each pass, plain writes once per 30 s.
    async fn cluster_time(&self) -> Result<Option<u64>> {
        let what = "reading the cluster's time";
        // A read: the driver may try it again on another node when the first one is down.
        let mut statement =
            scylla::statement::Statement::new("SELECT toUnixTimestamp(now()) FROM system.local");
        statement.set_is_idempotent(true);
        let sent = std::time::Instant::now();
        let rows = self
            .cluster
            .session
            .query_unpaged(statement, ())
            .await
            .map_err(|e| error::execution(what, e, &error::Context::default()))?
            .into_rows_result()
            .map_err(|e| error::shape(what, e))?;
        // `toUnixTimestamp` gives milliseconds as a bigint.
        let (millis,) = rows
            .single_row::<(i64,)>()
            .map_err(|e| error::shape(what, e))?;
        let half_trip = u64::try_from(sent.elapsed().as_micros() / 2).unwrap_or(u64::MAX);
        let millis = u64::try_from(millis).unwrap_or(0);
        Ok(Some(millis.saturating_mul(1000).saturating_add(half_trip)))
    }

    /// The listing index's maintenance (`listing::maintain`: splits of ranges past their bound, begun and finished
    /// by successive passes, under a lease).
    async fn maintain(&self) -> Result<()> {
        let report = listing::maintain(&self.cluster).await?;
        if report.new_ranges + report.moves_finished > 0 {
            tracing::info!(
                "listing index: {} new range(s) begun, {} move(s) finished ({} rows copied)",
                report.new_ranges,
                report.moves_finished,
                report.rows_copied
            );
        }
        Ok(())
    }

    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>> {
        stream::once(async move {
            let pager = self
                .cluster
                .session
                .execute_iter(self.cluster.st.scan_chunks.clone(), ())
                .await
                .map_err(|e| error::driver(format!("listing the chunks table: {e}"), true, e))?;
            let rows = pager
                .rows_stream::<(Vec<u8>, Vec<u8>, i32, i64)>()
                .map_err(|e| error::shape("chunk listing", e))?;
            Ok::<_, Error>(rows.map(move |row| -> Result<ChunkAddress> {
                let (key, version, salt, idx) = row.map_err(|e| {
                    error::driver(format!("listing the chunks table: {e}"), true, e)
                })?;
                let bad = |what: &str| error::malformed("chunk listing", what);
                Ok(ChunkAddress {
                    key: Bytes::from(key),
                    version: VersionId(u128::from_be_bytes(
                        version
                            .as_slice()
                            .try_into()
                            .map_err(|_| bad("a version is not 16 bytes"))?,
                    )),
                    salt: u32::try_from(salt).map_err(|_| bad("a salt is negative"))?,
                    index: u64::try_from(idx).map_err(|_| bad("a chunk index is negative"))?,
                })
            }))
        })
        .try_flatten()
        .boxed()
    }
}
