//! [`CqlStore`]: the [`ChunkStore`] implementation on ScyllaDB or Apache Cassandra.

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use saltblob_core::backend::{
    BackendInfo, BlobRef, ChunkAddress, ChunkId, ChunkStore, ChunkWrite, Namespace, Precondition,
    Previous, RecordWrite,
};
use saltblob_core::version::VersionId;
use saltblob_core::version::now_micros;
use saltblob_core::{Error, KeyDisplay, Result};
use scylla::client::PoolSize;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::ExecutionError;
use scylla::frame::response::result::ColumnType;
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::response::PagingState;
use scylla::response::query_result::QueryResult;
use scylla::serialize::SerializationError;
use scylla::serialize::value::SerializeValue;
use scylla::serialize::writers::{CellWriter, WrittenCellProof};
use scylla::statement::Consistency;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::{CqlConfig, DEFAULT_RF, validate_keyspace};
use crate::error::{self, Context, NAME};
use crate::schema::{self, CHUNKS, MANIFESTS, MARKER_KEY, MARKER_NS, RECORDS, SCHEMA_FORMAT};

/// Largest encoded chunk accepted: 8 MiB, half of Cassandra's largest mutation (16 MiB with the default 32 MiB
/// commit log segment) and of its largest request frame (`native_transport_max_frame_size`, 16 MiB).
pub const MAX_CHUNK_BYTES: u32 = 8 << 20;
/// Largest number of encoded chunk bytes in one `put_chunks`/`get_chunks` call. It is split into requests of
/// at most one chunk or one batch each; it also bounds one read response.
pub const MAX_BATCH_BYTES: usize = 4 << 20;
/// Bytes counted for each chunk in a batch besides its data (key, version, salt, index, timestamp, framing).
const ROW_OVERHEAD: usize = 64;
/// Rows per page of the manifest scan.
const SCAN_PAGE: i32 = 1000;
/// Concurrent partition deletes of one `delete_chunks` call.
const DELETE_CONCURRENCY: usize = 32;

/// The last timestamp handed out, in microseconds: write timestamps strictly increase within the process.
static CLOCK: AtomicI64 = AtomicI64::new(0);

/// A write timestamp (Unix microseconds) greater than every one this process handed out or observed before.
pub fn next_timestamp() -> i64 {
    let now = i64::try_from(now_micros()).unwrap_or(i64::MAX);
    let previous = CLOCK.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
        Some(now.max(last + 1))
    });
    let last = previous.unwrap_or_else(|v| v);
    now.max(last + 1)
}

/// Makes later [`next_timestamp`]s exceed `ts` (a timestamp the cluster chose, e.g. of a conditional write).
fn observe_timestamp(ts: i64) {
    CLOCK.fetch_max(ts, Ordering::SeqCst);
}

/// The cluster backend: Cassandra or ScyllaDB over CQL.
///
/// Tables (see `docs/format.md`): `manifests` (blob key → manifest), `chunks` (partition (key, version, salt),
/// row per chunk index) and `records` (partition per namespace, rows in key order). Writes carry client
/// timestamps from one strictly increasing process clock, so the later of two commits wins; conditional
/// writes are lightweight transactions. Chunk writes are bounded per host ([`CqlConfig::inflight_per_host`]):
/// a put that outruns the cluster waits instead of failing.
pub struct CqlStore {
    session: Session,
    config: CqlConfig,
    datacenter: String,
    st: Statements,
    throttle: Throttle,
}

impl std::fmt::Debug for CqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqlStore")
            .field("hosts", &self.config.hosts)
            .field("keyspace", &self.config.keyspace)
            .field("datacenter", &self.datacenter)
            .finish()
    }
}

/// Prepared statements of one record table.
struct RecordStatements {
    get: PreparedStatement,
    get_with_writetime: PreparedStatement,
    put: PreparedStatement,
    put_if_absent: PreparedStatement,
    put_if_equal: PreparedStatement,
    delete: PreparedStatement,
    delete_if_equal: PreparedStatement,
}

struct Statements {
    manifests: RecordStatements,
    records: RecordStatements,
    scan_manifest_keys: PreparedStatement,
    /// Scans of `records` by lower (>=) and upper (<) bound: [none/none, lower, upper, both].
    scan_records: [PreparedStatement; 4],
    put_chunk: PreparedStatement,
    get_chunks: PreparedStatement,
    delete_chunks: PreparedStatement,
    /// Every chunk's address (the primary key alone: no chunk data is read).
    scan_chunks: PreparedStatement,
}

/// A bound value: the few CQL types saltblob uses, without copying blobs.
#[derive(Clone, Debug)]
enum V {
    Blob(Bytes),
    Tiny(i8),
    Big(i64),
}

impl SerializeValue for V {
    fn serialize<'b>(
        &self,
        typ: &ColumnType,
        writer: CellWriter<'b>,
    ) -> std::result::Result<WrittenCellProof<'b>, SerializationError> {
        match self {
            V::Blob(b) => b.serialize(typ, writer),
            V::Tiny(n) => n.serialize(typ, writer),
            V::Big(n) => n.serialize(typ, writer),
        }
    }
}

/// The primary key values of a record.
fn key_values(ns: Namespace, key: &[u8]) -> Vec<V> {
    let key = V::Blob(Bytes::copy_from_slice(key));
    match ns {
        Namespace::Manifest => vec![key],
        _ => vec![V::Tiny(i8::from_le_bytes([ns.tag()])), key],
    }
}

/// The smallest key greater than every key starting with `prefix`, or `None` if there is none.
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A node's address; `None` when the owner of a partition is not known (its writes share one budget).
type Host = Option<(IpAddr, u16)>;

/// Bounds the bytes of chunk writes in flight to each host.
struct Throttle {
    per_host: usize,
    hosts: Mutex<HashMap<Host, Arc<Semaphore>>>,
}

impl Throttle {
    async fn acquire(&self, host: Host, bytes: usize) -> Result<OwnedSemaphorePermit> {
        let semaphore = {
            let mut hosts = self
                .hosts
                .lock()
                .map_err(|_| Error::backend(NAME, "throttle lock poisoned", false))?;
            Arc::clone(
                hosts
                    .entry(host)
                    .or_insert_with(|| Arc::new(Semaphore::new(self.per_host))),
            )
        };
        let permits = u32::try_from(bytes.clamp(1, self.per_host)).unwrap_or(u32::MAX);
        semaphore
            .acquire_many_owned(permits)
            .await
            .map_err(|_| Error::backend(NAME, "throttle closed", false))
    }
}

async fn prepare(session: &Session, cql: String, idempotent: bool) -> Result<PreparedStatement> {
    let mut st = session
        .prepare(cql.as_str())
        .await
        .map_err(|e| error::prepare(&cql, &e))?;
    st.set_is_idempotent(idempotent);
    Ok(st)
}

impl RecordStatements {
    async fn prepare(
        session: &Session,
        config: &CqlConfig,
        table: &str,
        key_cols: &[&str],
    ) -> Result<Self> {
        let ks = &config.keyspace;
        let cols = key_cols.join(", ");
        let marks = vec!["?"; key_cols.len()].join(", ");
        let cond = key_cols
            .iter()
            .map(|c| format!("{c} = ?"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let t = format!("{ks}.{table}");
        let (read, write, serial) = (
            config.read_consistency,
            config.write_consistency,
            config.serial_consistency,
        );
        let mut get = prepare(session, format!("SELECT value FROM {t} WHERE {cond}"), true).await?;
        let mut get_with_writetime = prepare(
            session,
            format!("SELECT value, WRITETIME(value) FROM {t} WHERE {cond}"),
            true,
        )
        .await?;
        let mut put = prepare(
            session,
            format!("INSERT INTO {t} ({cols}, value) VALUES ({marks}, ?) USING TIMESTAMP ?"),
            true,
        )
        .await?;
        let mut put_if_absent = prepare(
            session,
            format!("INSERT INTO {t} ({cols}, value) VALUES ({marks}, ?) IF NOT EXISTS"),
            false,
        )
        .await?;
        let mut put_if_equal = prepare(
            session,
            format!("UPDATE {t} SET value = ? WHERE {cond} IF value = ?"),
            false,
        )
        .await?;
        let mut delete = prepare(
            session,
            format!("DELETE FROM {t} USING TIMESTAMP ? WHERE {cond}"),
            true,
        )
        .await?;
        let mut delete_if_equal = prepare(
            session,
            format!("DELETE FROM {t} WHERE {cond} IF value = ?"),
            false,
        )
        .await?;
        for st in [&mut get, &mut get_with_writetime] {
            st.set_consistency(read);
        }
        for st in [&mut put, &mut delete] {
            st.set_consistency(write);
        }
        for st in [&mut put_if_absent, &mut put_if_equal, &mut delete_if_equal] {
            st.set_consistency(write);
            st.set_serial_consistency(Some(serial));
        }
        Ok(Self {
            get,
            get_with_writetime,
            put,
            put_if_absent,
            put_if_equal,
            delete,
            delete_if_equal,
        })
    }
}

impl Statements {
    async fn prepare(session: &Session, config: &CqlConfig) -> Result<Self> {
        let ks = &config.keyspace;
        let (read, write) = (config.read_consistency, config.write_consistency);
        let manifests = RecordStatements::prepare(session, config, MANIFESTS, &["key"]).await?;
        let records = RecordStatements::prepare(session, config, RECORDS, &["ns", "key"]).await?;
        let mut scan_manifest_keys =
            prepare(session, format!("SELECT key FROM {ks}.{MANIFESTS}"), true).await?;
        scan_manifest_keys.set_consistency(read);
        scan_manifest_keys.set_page_size(SCAN_PAGE);
        let base = format!("SELECT key, value FROM {ks}.{RECORDS} WHERE ns = ?");
        let mut scan_records = [
            prepare(session, format!("{base} LIMIT ?"), true).await?,
            prepare(session, format!("{base} AND key >= ? LIMIT ?"), true).await?,
            prepare(session, format!("{base} AND key < ? LIMIT ?"), true).await?,
            prepare(
                session,
                format!("{base} AND key >= ? AND key < ? LIMIT ?"),
                true,
            )
            .await?,
        ];
        for st in &mut scan_records {
            st.set_consistency(read);
        }
        let mut put_chunk = prepare(
            session,
            format!("INSERT INTO {ks}.{CHUNKS} (key, version, salt, idx, data) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"),
            true,
        )
        .await?;
        put_chunk.set_consistency(write);
        let mut get_chunks = prepare(
            session,
            format!("SELECT idx, data FROM {ks}.{CHUNKS} WHERE key = ? AND version = ? AND salt = ? AND idx IN ?"),
            true,
        )
        .await?;
        get_chunks.set_consistency(read);
        let mut delete_chunks = prepare(
            session,
            format!("DELETE FROM {ks}.{CHUNKS} USING TIMESTAMP ? WHERE key = ? AND version = ? AND salt = ?"),
            true,
        )
        .await?;
        delete_chunks.set_consistency(write);
        let mut scan_chunks = prepare(
            session,
            format!("SELECT key, version, salt, idx FROM {ks}.{CHUNKS}"),
            true,
        )
        .await?;
        scan_chunks.set_consistency(read);
        scan_chunks.set_page_size(SCAN_PAGE);
        Ok(Self {
            manifests,
            records,
            scan_manifest_keys,
            scan_records,
            put_chunk,
            get_chunks,
            delete_chunks,
            scan_chunks,
        })
    }
}

/// One request of a `put_chunks` call: chunks of one partition, sent alone or as one unlogged batch.
struct WriteUnit {
    salt: u32,
    chunks: Vec<ChunkWrite>,
    bytes: usize,
}

impl CqlStore {
    /// Connects to the cluster, creates the keyspace and tables if missing (waiting for schema agreement) and
    /// checks the schema format.
    ///
    /// Fails with a clear error, before creating anything, when no host answers within the connect timeout,
    /// when the data center is ambiguous or unknown, or when an explicit replication factor exceeds the data
    /// center's node count.
    pub async fn connect(config: CqlConfig) -> Result<Self> {
        let mut config = config;
        config.validate()?;
        config.keyspace =
            validate_keyspace(&config.keyspace).map_err(|r| Error::invalid("keyspace", r))?;
        let session = Self::open_session(&config).await?;
        let datacenter = Self::pick_datacenter(&session, &config)?;
        // Requests go to replicas in the chosen data center first (token-aware).
        let policy = DefaultPolicy::builder()
            .prefer_datacenter(datacenter.clone())
            .token_aware(true)
            .build();
        let profile = session
            .get_default_execution_profile_handle()
            .pointee_to_builder()
            .load_balancing_policy(policy)
            .build();
        session
            .get_default_execution_profile_handle()
            .clone()
            .map_to_another_profile(profile);

        Self::ensure_schema(&session, &config, &datacenter).await?;
        let st = Statements::prepare(&session, &config).await?;
        let throttle = Throttle {
            per_host: config.inflight_per_host,
            hosts: Mutex::new(HashMap::new()),
        };
        let store = Self {
            session,
            config,
            datacenter,
            st,
            throttle,
        };
        store.check_format().await?;
        Ok(store)
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &CqlConfig {
        &self.config
    }

    /// The data center requests go to.
    pub fn datacenter(&self) -> &str {
        &self.datacenter
    }

    /// The driver session (for tools and tests that need plain CQL).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// A plain driver session to the cluster of `config`, without touching any keyspace (for tools such as
    /// [`crate::import`]). Fails with a clear error when no host answers within the connect timeout.
    pub async fn open_session(config: &CqlConfig) -> Result<Session> {
        let profile = ExecutionProfile::builder()
            .request_timeout(Some(config.request_timeout))
            // Only schema queries use the profile's consistency (every saltblob statement sets its own):
            // system tables are local, so ONE.
            .consistency(Consistency::One)
            .serial_consistency(Some(config.serial_consistency))
            .build();
        let mut builder = SessionBuilder::new()
            .known_nodes(&config.hosts)
            .connection_timeout(config.connect_timeout)
            .pool_size(PoolSize::PerShard(config.connections))
            .default_execution_profile_handle(profile.into_handle())
            .keyspaces_to_fetch([config.keyspace.clone()])
            .schema_agreement_timeout(Duration::from_secs(60))
            .tcp_nodelay(true);
        if let Some(c) = &config.credentials {
            builder = builder.user(c.user.clone(), c.password.clone());
        }
        // The driver bounds each connection attempt; this bounds the whole handshake and metadata fetch.
        let deadline = config.connect_timeout + Duration::from_secs(2);
        match tokio::time::timeout(deadline, builder.build()).await {
            Ok(Ok(session)) => Ok(session),
            Ok(Err(e)) => Err(error::connect(&config.hosts, config.connect_timeout, &e)),
            Err(_) => Err(Error::backend(
                NAME,
                format!(
                    "cannot connect to the cluster at {}: no answer within {:?} (check the hosts and that CQL is \
                     reachable there; raise connect_timeout for a slow network)",
                    config.hosts.join(","),
                    deadline
                ),
                true,
            )),
        }
    }

    fn pick_datacenter(session: &Session, config: &CqlConfig) -> Result<String> {
        let state = session.get_cluster_state();
        let mut dcs: Vec<String> = state
            .get_nodes_info()
            .iter()
            .filter_map(|n| n.datacenter.clone())
            .collect();
        dcs.sort();
        dcs.dedup();
        match (&config.datacenter, dcs.as_slice()) {
            (Some(dc), _) if dcs.contains(dc) => Ok(dc.clone()),
            (Some(dc), known) => Err(Error::invalid(
                "data center",
                format!(
                    "\"{dc}\" is not a data center of this cluster; it has: {}",
                    known.join(", ")
                ),
            )),
            (None, [only]) => Ok(only.clone()),
            (None, []) => Err(Error::backend(
                NAME,
                "the cluster reports no data center for its nodes; set dc= in the URL",
                false,
            )),
            (None, several) => Err(Error::invalid(
                "data center",
                format!(
                    "the cluster has several data centers ({}); choose one with dc= in the URL",
                    several.join(", ")
                ),
            )),
        }
    }

    fn dc_nodes(session: &Session, dc: &str) -> usize {
        session
            .get_cluster_state()
            .get_nodes_info()
            .iter()
            .filter(|n| n.datacenter.as_deref() == Some(dc))
            .count()
    }

    async fn ensure_schema(session: &Session, config: &CqlConfig, dc: &str) -> Result<()> {
        let ks = &config.keyspace;
        if schema::keyspace_replication(session, ks).await?.is_none() {
            let nodes = Self::dc_nodes(session, dc);
            let rf = match config.replication_factor {
                Some(rf) => {
                    let rf = usize::try_from(rf).unwrap_or(usize::MAX);
                    if rf > nodes {
                        return Err(Error::invalid(
                            "replication factor",
                            format!(
                                "rf={rf}, but data center \"{dc}\" has {nodes} node(s); keyspace {ks} was not created. \
                                 Use rf={nodes} or less, or add nodes"
                            ),
                        ));
                    }
                    rf
                }
                None => (DEFAULT_RF as usize).min(nodes).max(1),
            };
            tracing::info!(
                "creating keyspace {ks} with replication factor {rf} in data center {dc}"
            );
            schema::ddl(session, &schema::keyspace_ddl(ks, dc, rf)).await?;
        }
        let existing = schema::tables(session, ks).await?;
        for (table, ddl) in schema::table_ddl(ks) {
            if !existing.iter().any(|t| t == table) {
                tracing::info!("creating table {ks}.{table}");
                schema::ddl(session, &ddl).await?;
            }
        }
        session
            .await_schema_agreement()
            .await
            .map_err(|e| error::schema(&e))?;
        session.refresh_metadata().await.map_err(|e| {
            Error::backend(
                NAME,
                format!("cannot read the cluster's metadata after creating the schema: {e}"),
                true,
            )
        })?;
        Ok(())
    }

    /// Reads the schema format marker, writing it on first use; refuses a keyspace of another format.
    async fn check_format(&self) -> Result<()> {
        let key = vec![V::Tiny(MARKER_NS), V::Blob(Bytes::from_static(MARKER_KEY))];
        let what = || {
            format!(
                "reading the schema format marker of keyspace {}",
                self.config.keyspace
            )
        };
        let result = self
            .run(what, true, || {
                self.session.execute_unpaged(&self.st.records.get, &key)
            })
            .await?;
        match first_value(result, "the schema format marker")? {
            None => {
                let mut row = key.clone();
                // A fixed timestamp: every first connection writes the same marker.
                row.extend([V::Blob(Bytes::from_static(&[SCHEMA_FORMAT])), V::Big(1)]);
                // At ONE: the marker is the same wherever it is written, and a reader that misses it writes it
                // again. A keyspace whose replicas cannot meet the configured consistency fails on its first
                // real write, with an explanation, rather than here.
                let mut put = self.st.records.put.clone();
                put.set_consistency(Consistency::One);
                let what = || "writing the schema format marker".to_owned();
                self.run(what, true, || self.session.execute_unpaged(&put, &row))
                    .await?;
                Ok(())
            }
            Some(v) if v.as_ref() == [SCHEMA_FORMAT] => Ok(()),
            Some(v) => Err(Error::corrupt(
                format!("keyspace {}", self.config.keyspace),
                format!(
                    "schema format marker is {v:?}; this build reads format [{SCHEMA_FORMAT}] (is it from a newer saltblob?)"
                ),
            )),
        }
    }

    /// What error messages need to explain unavailable replicas.
    fn context(&self) -> Context {
        let state = self.session.get_cluster_state();
        let replication_factor =
            state
                .get_keyspace(&self.config.keyspace)
                .and_then(|k| match &k.strategy {
                    scylla::cluster::metadata::Strategy::NetworkTopologyStrategy {
                        datacenter_repfactors,
                    } => datacenter_repfactors.get(&self.datacenter).copied(),
                    scylla::cluster::metadata::Strategy::SimpleStrategy { replication_factor } => {
                        Some(*replication_factor)
                    }
                    _ => None,
                });
        Context {
            keyspace: self.config.keyspace.clone(),
            datacenter: self.datacenter.clone(),
            replication_factor,
            dc_nodes: Self::dc_nodes(&self.session, &self.datacenter),
        }
    }

    /// Runs a request, retrying transient failures of idempotent ones with exponential backoff (50 ms, doubling,
    /// with jitter) up to [`CqlConfig::attempts`] attempts.
    async fn run<T, W, F, Fut>(&self, what: W, idempotent: bool, mut op: F) -> Result<T>
    where
        W: Fn() -> String,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, ExecutionError>>,
    {
        let mut delay = Duration::from_millis(50);
        let mut attempt = 1;
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let mapped = error::execution(&what(), &e, &self.context());
                    if !(idempotent && mapped.is_retryable() && attempt < self.config.attempts) {
                        return Err(mapped);
                    }
                    tracing::debug!("attempt {attempt} failed, retrying in {delay:?}: {mapped}");
                    let jitter = Duration::from_micros(rand::random::<u64>() % 20_000);
                    tokio::time::sleep(delay + jitter).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                    attempt += 1;
                }
            }
        }
    }

    fn records(&self, ns: Namespace) -> &RecordStatements {
        match ns {
            Namespace::Manifest => &self.st.manifests,
            _ => &self.st.records,
        }
    }

    /// The node that owns a chunk partition (its primary replica), for per-host backpressure.
    fn owner(&self, key: &Bytes, version: &Bytes, salt: i32) -> Host {
        let values = (0i64, key, version, salt);
        let token = self
            .st
            .delete_chunks
            .calculate_token(&values)
            .ok()
            .flatten()?;
        let state = self.session.get_cluster_state();
        let replicas = state.get_token_endpoints(&self.config.keyspace, CHUNKS, token);
        replicas
            .first()
            .map(|(node, _)| (node.address.ip(), node.address.port()))
    }

    /// Executes a conditional write; returns whether it applied and, if not, the current value.
    async fn lwt(
        &self,
        what: &str,
        st: &PreparedStatement,
        values: Vec<V>,
    ) -> Result<(bool, Option<Bytes>)> {
        let result = self
            .run(
                || what.to_owned(),
                false,
                || self.session.execute_unpaged(st, &values),
            )
            .await?;
        lwt_outcome(result, what)
    }

    /// After a conditional write applied (`written`: the new value, `None` for a delete; `before`: the value its
    /// condition matched, `None` for "absent"): reads the row back. Cassandra stamps a conditional write with the
    /// cluster's clock and plain writes carry this process's, so a plain write made just before (to the value
    /// the condition saw) can carry a later timestamp and shadow the conditional one when the clocks differ by
    /// more than the gap. The read-back detects that and writes the same outcome again, plainly, with a
    /// timestamp after the shadowing one. It also moves the process clock past the conditional write's time,
    /// so that later plain writes of this process order after it.
    async fn settle_lwt(
        &self,
        ns: Namespace,
        key: &[u8],
        written: Option<&Bytes>,
        before: Option<&Bytes>,
    ) {
        let values = key_values(ns, key);
        let what = || "reading back a conditional write".to_owned();
        let st = self.records(ns);
        let outcome = self
            .run(what, true, || {
                self.session
                    .execute_unpaged(&st.get_with_writetime, &values)
            })
            .await;
        let row = outcome.and_then(|r| {
            r.into_rows_result()
                .map_err(|e| error::shape("read-back", e))?
                .maybe_first_row::<(Option<Bytes>, Option<i64>)>()
                .map_err(|e| error::shape("read-back", e))
        });
        let (found, ts) = match row {
            Ok(Some((value, ts))) => (value, ts),
            Ok(None) => (None, None),
            Err(e) => {
                tracing::debug!("could not read back a conditional write: {e}");
                return;
            }
        };
        if found.as_ref() == written {
            if let Some(ts) = ts {
                observe_timestamp(ts);
            }
            return;
        }
        let shown = KeyDisplay::from(key);
        if found.as_ref() != before {
            tracing::warn!(
                "conditional write of key \"{shown}\" was replaced right away by a concurrent write"
            );
            return;
        }
        // Shadowed by the write the condition saw: write the outcome again, after it.
        let at = ts.map_or_else(next_timestamp, |t| {
            observe_timestamp(t);
            next_timestamp()
        });
        tracing::debug!(
            "conditional write of key \"{shown}\" was shadowed by an earlier write with a later timestamp \
             (client and cluster clocks differ); writing it again at {at}"
        );
        let what = || format!("re-asserting the conditional write of \"{shown}\"");
        let again = match written {
            Some(value) => {
                let mut row = key_values(ns, key);
                row.extend([V::Blob(value.clone()), V::Big(at)]);
                self.run(what, true, || self.session.execute_unpaged(&st.put, &row))
                    .await
            }
            None => {
                let mut row = vec![V::Big(at)];
                row.extend(key_values(ns, key));
                self.run(what, true, || {
                    self.session.execute_unpaged(&st.delete, &row)
                })
                .await
            }
        };
        if let Err(e) = again {
            tracing::warn!("could not re-assert the conditional write of \"{shown}\": {e}");
        }
    }

    async fn write_unit(
        &self,
        blob: &BlobRef,
        version: &Bytes,
        ts: i64,
        unit: WriteUnit,
    ) -> Result<()> {
        let salt = i32::try_from(unit.salt)
            .map_err(|_| Error::invalid("salt", format!("{} is over 2^31", unit.salt)))?;
        let owner = self.owner(&blob.key, version, salt);
        let _permit = self.throttle.acquire(owner, unit.bytes).await?;
        let rows = unit
            .chunks
            .iter()
            .map(|c| {
                let idx = i64::try_from(c.index).map_err(|_| {
                    Error::invalid("chunk index", format!("{} is over 2^63", c.index))
                })?;
                Ok((
                    blob.key.clone(),
                    version.clone(),
                    salt,
                    idx,
                    c.data.clone(),
                    ts,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let what = || {
            format!(
                "write of {} chunk(s) ({} bytes, salt {}) of key \"{}\" version {}",
                rows.len(),
                unit.bytes,
                unit.salt,
                KeyDisplay::from(&blob.key[..]),
                blob.version
            )
        };
        if let [row] = rows.as_slice() {
            self.run(what, true, || {
                self.session.execute_unpaged(&self.st.put_chunk, row)
            })
            .await?;
        } else {
            let mut batch = Batch::new(BatchType::Unlogged);
            for _ in &rows {
                batch.append_statement(self.st.put_chunk.clone());
            }
            batch.set_is_idempotent(true);
            batch.set_consistency(self.config.write_consistency);
            self.run(what, true, || self.session.batch(&batch, &rows))
                .await?;
        }
        Ok(())
    }

    /// Keys of the manifest table that start with `prefix` and sort after `after`, the smallest `keep` of them,
    /// in order; and whether more matched than were kept. One full scan of the table.
    async fn scan_manifest_keys(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        keep: usize,
    ) -> Result<(Vec<Bytes>, bool)> {
        let mut heap: BinaryHeap<Bytes> = BinaryHeap::new();
        let mut more = false;
        let mut paging = PagingState::start();
        loop {
            let what = || {
                format!(
                    "scan of the manifest table of keyspace {}",
                    self.config.keyspace
                )
            };
            let (result, next) = self
                .run(what, true, || {
                    self.session.execute_single_page(
                        &self.st.scan_manifest_keys,
                        (),
                        paging.clone(),
                    )
                })
                .await?;
            let rows = result
                .into_rows_result()
                .map_err(|e| error::shape("manifest scan", e))?;
            for row in rows
                .rows::<(Bytes,)>()
                .map_err(|e| error::shape("manifest scan", e))?
            {
                let (key,) = row.map_err(|e| error::shape("manifest scan", e))?;
                if !key.starts_with(prefix) || after.is_some_and(|a| key.as_ref() <= a) {
                    continue;
                }
                heap.push(key);
                if heap.len() > keep {
                    heap.pop();
                    more = true;
                }
            }
            match next.into_paging_control_flow() {
                std::ops::ControlFlow::Break(()) => break,
                std::ops::ControlFlow::Continue(state) => paging = state,
            }
        }
        Ok((heap.into_sorted_vec(), more))
    }

    async fn scan_manifests(
        &self,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        let mut out = Vec::with_capacity(limit.min(4096));
        let mut after: Option<Bytes> = start_after.map(Bytes::copy_from_slice);
        // A few spare keys per pass: a key deleted between the scan and its read is skipped, not counted.
        let keep = limit.saturating_add(limit / 4 + 16);
        while out.len() < limit {
            let (keys, more) = self
                .scan_manifest_keys(prefix, after.as_deref(), keep)
                .await?;
            let Some(last) = keys.last().cloned() else {
                break;
            };
            let values: Vec<Option<Bytes>> = stream::iter(keys.clone())
                .map(|k| async move { self.get_record(Namespace::Manifest, &k).await })
                .buffered(32)
                .try_collect()
                .await?;
            for (k, v) in keys.into_iter().zip(values) {
                if let Some(v) = v
                    && out.len() < limit
                {
                    out.push((k, v));
                }
            }
            if !more {
                break;
            }
            after = Some(last);
        }
        Ok(out)
    }

    async fn scan_other(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        let ns_value = V::Tiny(i8::from_le_bytes([ns.tag()]));
        let lower: Option<&[u8]> = match start_after {
            Some(a) if a >= prefix => Some(a),
            _ if prefix.is_empty() => None,
            _ => Some(prefix),
        };
        let upper = prefix_successor(prefix);
        // `>=` on start_after: one extra row, dropped below if it is start_after itself.
        let fetch = i32::try_from(limit.saturating_add(1)).unwrap_or(i32::MAX);
        let mut values = vec![ns_value];
        let index = match (lower, &upper) {
            (None, None) => 0,
            (Some(_), None) => 1,
            (None, Some(_)) => 2,
            (Some(_), Some(_)) => 3,
        };
        if let Some(l) = lower {
            values.push(V::Blob(Bytes::copy_from_slice(l)));
        }
        if let Some(u) = upper {
            values.push(V::Blob(Bytes::from(u)));
        }
        let st = self
            .st
            .scan_records
            .get(index)
            .ok_or_else(|| error::shape("record scan", "statement missing"))?;
        let what = || format!("scan of namespace {ns:?}");
        let result = self
            .run(what, true, || {
                self.session
                    .execute_unpaged(st, LimitRow(values.clone(), fetch))
            })
            .await?;
        let rows = result
            .into_rows_result()
            .map_err(|e| error::shape("record scan", e))?;
        let mut out = Vec::new();
        for row in rows
            .rows::<(Bytes, Bytes)>()
            .map_err(|e| error::shape("record scan", e))?
        {
            let (k, v) = row.map_err(|e| error::shape("record scan", e))?;
            if start_after.is_some_and(|a| k.as_ref() <= a) || !k.starts_with(prefix) {
                continue;
            }
            if out.len() < limit {
                out.push((k, v));
            }
        }
        Ok(out)
    }
}

/// Bound values followed by a `LIMIT` (an int).
struct LimitRow(Vec<V>, i32);

impl scylla::serialize::row::SerializeRow for LimitRow {
    fn serialize(
        &self,
        ctx: &scylla::serialize::row::RowSerializationContext<'_>,
        writer: &mut scylla::serialize::writers::RowWriter,
    ) -> std::result::Result<(), SerializationError> {
        let mut all: Vec<LimitValue<'_>> = self.0.iter().map(LimitValue::V).collect();
        all.push(LimitValue::Int(self.1));
        scylla::serialize::row::SerializeRow::serialize(&all, ctx, writer)
    }

    fn is_empty(&self) -> bool {
        false
    }
}

enum LimitValue<'a> {
    V(&'a V),
    Int(i32),
}

impl SerializeValue for LimitValue<'_> {
    fn serialize<'b>(
        &self,
        typ: &ColumnType,
        writer: CellWriter<'b>,
    ) -> std::result::Result<WrittenCellProof<'b>, SerializationError> {
        match self {
            LimitValue::V(v) => v.serialize(typ, writer),
            LimitValue::Int(n) => n.serialize(typ, writer),
        }
    }
}

/// The `value` column of the first row of `result`, if any.
fn first_value(result: QueryResult, what: &str) -> Result<Option<Bytes>> {
    let rows = result
        .into_rows_result()
        .map_err(|e| error::shape(what, e))?;
    let row = rows
        .maybe_first_row::<(Option<Bytes>,)>()
        .map_err(|e| error::shape(what, e))?;
    Ok(row.and_then(|(v,)| v))
}

/// Whether a conditional write applied and, if not, the current `value` (absent row: `None`).
fn lwt_outcome(result: QueryResult, what: &str) -> Result<(bool, Option<Bytes>)> {
    let rows = result
        .into_rows_result()
        .map_err(|e| error::shape(what, e))?;
    let value_index = rows.column_specs().get_by_name("value").map(|(i, _)| i);
    let row: Row = rows.first_row().map_err(|e| error::shape(what, e))?;
    let applied = match row.columns.first() {
        Some(Some(CqlValue::Boolean(b))) => *b,
        other => return Err(error::shape(what, format!("[applied] column is {other:?}"))),
    };
    let current = match value_index.and_then(|i| row.columns.get(i).cloned().flatten()) {
        Some(CqlValue::Blob(b)) => Some(Bytes::from(b)),
        Some(other) => return Err(error::shape(what, format!("value column is {other:?}"))),
        None => None,
    };
    Ok((applied, current))
}

#[async_trait]
impl ChunkStore for CqlStore {
    fn info(&self) -> BackendInfo {
        BackendInfo::new(NAME, MAX_CHUNK_BYTES, MAX_BATCH_BYTES, false).with_internal_retries()
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        let values = key_values(ns, key);
        let what = || format!("read of {ns:?} record \"{}\"", KeyDisplay::from(key));
        let result = self
            .run(what, true, || {
                self.session.execute_unpaged(&self.records(ns).get, &values)
            })
            .await?;
        first_value(result, "record read")
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let st = self.records(ns);
        let shown = KeyDisplay::from(key);
        match cond {
            Precondition::None => {
                let mut row = key_values(ns, key);
                row.extend([V::Blob(value), V::Big(next_timestamp())]);
                let what = || format!("write of {ns:?} record \"{shown}\"");
                self.run(what, true, || self.session.execute_unpaged(&st.put, &row))
                    .await?;
                Ok(RecordWrite::Done(Previous::Unknown))
            }
            Precondition::Absent => {
                let mut row = key_values(ns, key);
                row.push(V::Blob(value.clone()));
                let what = format!("conditional (if absent) write of {ns:?} record \"{shown}\"");
                match self.lwt(&what, &st.put_if_absent, row).await? {
                    (true, _) => {
                        self.settle_lwt(ns, key, Some(&value), None).await;
                        Ok(RecordWrite::Done(Previous::Absent))
                    }
                    (false, current) => Ok(RecordWrite::ConditionFailed(current)),
                }
            }
            Precondition::Equals(expected) => {
                let mut row = vec![V::Blob(value.clone())];
                row.extend(key_values(ns, key));
                row.push(V::Blob(expected.clone()));
                let what = format!("conditional (if equal) write of {ns:?} record \"{shown}\"");
                match self.lwt(&what, &st.put_if_equal, row).await? {
                    (true, _) => {
                        self.settle_lwt(ns, key, Some(&value), Some(expected)).await;
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
        let st = self.records(ns);
        let shown = KeyDisplay::from(key);
        match cond.for_delete() {
            Precondition::None | Precondition::Absent => {
                let mut row = vec![V::Big(next_timestamp())];
                row.extend(key_values(ns, key));
                let what = || format!("delete of {ns:?} record \"{shown}\"");
                self.run(what, true, || {
                    self.session.execute_unpaged(&st.delete, &row)
                })
                .await?;
                Ok(RecordWrite::Done(Previous::Unknown))
            }
            Precondition::Equals(expected) => {
                let mut row = key_values(ns, key);
                row.push(V::Blob(expected.clone()));
                let what = format!("conditional delete of {ns:?} record \"{shown}\"");
                match self.lwt(&what, &st.delete_if_equal, row).await? {
                    (true, _) => {
                        self.settle_lwt(ns, key, None, Some(expected)).await;
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
        match ns {
            Namespace::Manifest => self.scan_manifests(prefix, start_after, limit).await,
            _ => self.scan_other(ns, prefix, start_after, limit).await,
        }
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        let ts = next_timestamp();
        let version = Bytes::copy_from_slice(&blob.version.to_be_bytes());
        let mut by_salt: BTreeMap<u32, Vec<ChunkWrite>> = BTreeMap::new();
        for c in chunks {
            by_salt.entry(c.salt).or_default().push(c);
        }
        let row_overhead = ROW_OVERHEAD + blob.key.len();
        let mut units = Vec::new();
        for (salt, chunks) in by_salt {
            let mut unit = WriteUnit {
                salt,
                chunks: Vec::new(),
                bytes: 0,
            };
            for c in chunks {
                let size = c.data.len() + row_overhead;
                if !unit.chunks.is_empty() && unit.bytes + size > self.config.batch_bytes {
                    units.push(std::mem::replace(
                        &mut unit,
                        WriteUnit {
                            salt,
                            chunks: Vec::new(),
                            bytes: 0,
                        },
                    ));
                }
                unit.bytes += size;
                unit.chunks.push(c);
            }
            if !unit.chunks.is_empty() {
                units.push(unit);
            }
        }
        // Every partition at once; the per-host throttle holds back what the cluster cannot take yet.
        futures::future::try_join_all(
            units
                .into_iter()
                .map(|u| self.write_unit(blob, &version, ts, u)),
        )
        .await?;
        Ok(())
    }

    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>> {
        let version = Bytes::copy_from_slice(&blob.version.to_be_bytes());
        let mut by_salt: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
        for c in chunks {
            let idx = i64::try_from(c.index)
                .map_err(|_| Error::invalid("chunk index", format!("{} is over 2^63", c.index)))?;
            by_salt.entry(c.salt).or_default().push(idx);
        }
        let reads = by_salt.into_iter().map(|(salt, idxs)| {
            let (key, version) = (blob.key.clone(), version.clone());
            async move {
                let salt_i = i32::try_from(salt)
                    .map_err(|_| Error::invalid("salt", format!("{salt} is over 2^31")))?;
                let values = (key.clone(), version, salt_i, idxs);
                let what = || {
                    format!(
                        "read of {} chunk(s) (salt {salt}) of key \"{}\" version {}",
                        values.3.len(),
                        KeyDisplay::from(&key[..]),
                        blob.version
                    )
                };
                let result = self
                    .run(what, true, || {
                        self.session.execute_unpaged(&self.st.get_chunks, &values)
                    })
                    .await?;
                let rows = result
                    .into_rows_result()
                    .map_err(|e| error::shape("chunk read", e))?;
                let mut found = Vec::new();
                for row in rows
                    .rows::<(i64, Bytes)>()
                    .map_err(|e| error::shape("chunk read", e))?
                {
                    let (idx, data) = row.map_err(|e| error::shape("chunk read", e))?;
                    found.push(((salt, idx), data));
                }
                Ok::<_, Error>(found)
            }
        });
        let mut found: HashMap<(u32, i64), Bytes> = HashMap::new();
        for part in futures::future::try_join_all(reads).await? {
            found.extend(part);
        }
        Ok(chunks
            .iter()
            .map(|c| {
                i64::try_from(c.index)
                    .ok()
                    .and_then(|idx| found.get(&(c.salt, idx)).cloned())
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
                    self.run(what, true, || {
                        self.session
                            .execute_unpaged(&self.st.delete_chunks, &values)
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

    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>> {
        let failed = |e: &dyn std::fmt::Display| {
            Error::backend(NAME, format!("listing the chunks table: {e}"), true)
        };
        stream::once(async move {
            let pager = self
                .session
                .execute_iter(self.st.scan_chunks.clone(), ())
                .await
                .map_err(|e| failed(&e))?;
            let rows = pager
                .rows_stream::<(Vec<u8>, Vec<u8>, i32, i64)>()
                .map_err(|e| error::shape("chunk listing", e))?;
            Ok::<_, Error>(rows.map(move |row| -> Result<ChunkAddress> {
                let (key, version, salt, idx) = row.map_err(|e| failed(&e))?;
                let bad = |what: &str| error::shape("chunk listing", what.to_owned());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_strictly_increase() {
        let mut last = next_timestamp();
        for _ in 0..10_000 {
            let t = next_timestamp();
            assert!(t > last);
            last = t;
        }
        observe_timestamp(last + 1_000_000);
        assert!(
            next_timestamp() > last + 1_000_000,
            "observed timestamps push the clock"
        );
    }

    #[test]
    fn prefix_successors() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
    }

    #[test]
    fn record_keys_bind_namespace_tags() {
        assert!(matches!(
            key_values(Namespace::Manifest, b"k").as_slice(),
            [V::Blob(_)]
        ));
        assert!(matches!(
            key_values(Namespace::Reclaim, b"k").as_slice(),
            [V::Tiny(1), V::Blob(_)]
        ));
    }
}
